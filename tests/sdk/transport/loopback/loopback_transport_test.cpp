// The loopback transport, added by its folder alone: the registry knows it, telemetry counts
// its transfers under its name, and it keeps to one process and to one-shot operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"
#include "support/pattern.hpp"
#include "support/prometheus_text.hpp"
#include "transport/registry.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

ConnectorOptions loopback_only() {
  ConnectorOptions options;
  options.transports = {"loopback"};
  return options;
}

TEST(LoopbackTransport, TheRegistryKnowsIt) {
  const auto known = detail::known_transports();
  EXPECT_NE(std::find(known.begin(), known.end(), "loopback"), known.end());
  Connector connector(loopback_only());
  EXPECT_EQ(connector.transports(), std::vector<std::string>{"loopback"});
}

TEST(LoopbackTransport, TelemetryCountsItsTransfersUnderItsName) {
  Connector owner(loopback_only()), reader(loopback_only());
  std::vector<std::byte> source(65536), target(65536);
  fill_pattern(source, 5);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 5), target.size());
  for (auto* connector : {&owner, &reader}) {
    const auto metrics = parse_prometheus(to_prometheus(connector->telemetry()));
    ASSERT_TRUE(metrics.problems.empty()) << metrics.problems.front();
    const auto side = connector == &owner ? "passive" : "active";
    const std::map<std::string, std::string> labels{
        {"transport", "loopback"}, {"kind", "read"}, {"side", side}, {"status", "complete"}};
    EXPECT_EQ(metrics.sum("memwire_operations_total", labels), 1) << side;
    EXPECT_EQ(metrics.sum("memwire_transferred_bytes_total", labels), 65536) << side;
  }
}

// Its offers name this process: metadata from another one (here, its process attribute
// changed) shares no transport with it, and says so.
TEST(LoopbackTransport, AnOfferOfAnotherProcessIsNotReachable) {
  Connector owner(loopback_only()), writer(loopback_only());
  std::vector<std::byte> target(4096), source(4096);
  const auto real = owner.create_writable({Descriptor(std::span(target))}).metadata();
  auto fields = real.fields();
  fields.endpoint.transports.at(0).attributes.at("process") += "-elsewhere";
  const RdmaMetadata elsewhere(std::move(fields));
  try {
    auto write = writer.begin_write({Descriptor(std::span(source))}, elsewhere);
    ADD_FAILURE() << "a write to another process's loopback offer began";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Transport);
    EXPECT_NE(std::string(error.what()).find("no usable transport in common"), std::string::npos)
        << error.what();
  }
}

// It claims no pool blocks (serves_pools): a pool with only it has no transport, and says why.
TEST(LoopbackTransport, APoolWithOnlyItIsRefused) {
  Connector connector(loopback_only());
  std::vector<std::byte> blocks(4 * 4096);
  EXPECT_EQ(error_code_of([&] {
              (void)connector.register_pool({{blocks.data(), 4096, 0, 4, {}}});
            }),
            ErrorCode::Transport);
}

}  // namespace
