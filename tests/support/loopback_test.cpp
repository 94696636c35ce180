// The ports tests hand to the programs they start must not be ones the kernel gives any process
// that binds to port 0 or connects: those were taken between the check and the use (CI flake of
// WorkerMetrics.ProducerAndConsumerServeTheirCountsWhileLingering, "cannot listen on ...").
#include "support/loopback.hpp"

#include <gtest/gtest.h>

#include <set>

namespace {

using namespace memwire::test_support;

TEST(FreeLoopbackPort, LiesBelowTheKernelsEphemeralRangeAndIsNeverHandedOutTwice) {
  const auto ephemeral = ephemeral_ports();
  std::set<std::uint16_t> seen;
  for (int i = 0; i < 64; ++i) {
    const auto port = free_loopback_port();
    EXPECT_LT(port, ephemeral.first) << "the kernel may give port " << port << " to anyone";
    EXPECT_GT(port, 1023);
    EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice";
  }
}

}  // namespace
