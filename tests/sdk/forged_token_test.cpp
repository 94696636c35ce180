#include <gtest/gtest.h>

#include "sdk/forged_token_check.hpp"

using namespace memwire;

namespace {

class ForgedToken : public ::testing::TestWithParam<std::string> {};

TEST_P(ForgedToken, WriteWithTheLastCharacterChangedIsRefused) {
  ConnectorOptions options;
  options.transports = {GetParam()};
  test_support::expect_forged_writes_refused(options, options);
}

INSTANTIATE_TEST_SUITE_P(Transports, ForgedToken, ::testing::Values("tcp", "shm"));

}  // namespace
