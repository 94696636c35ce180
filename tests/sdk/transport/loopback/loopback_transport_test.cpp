// The loopback transport, added by its folder alone: the registry knows it, telemetry counts
// its transfers under its name, it keeps to one process, and it serves pools through the
// owner's floor.
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

// It serves pools with nothing of the owner's side written in it (the floor's, sdk/src/owner/):
// blocks move by index, the tag comes after them, a stale generation and a wrong token are
// refused as on every transport.
TEST(LoopbackTransport, APoolWithOnlyItMovesBlocksThroughTheOwnersFloor) {
  Connector owner(loopback_only()), writer(loopback_only());
  std::vector<std::byte> there(4 * 4096), here(4 * 4096);
  fill_pattern(here, 9);
  auto remote = owner.register_pool({{there.data(), 4096, 0, 4, {}}});
  auto local = writer.register_pool({{here.data(), 4096, 0, 4, {}}});
  auto write =
      writer.write_blocks(local, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}, remote.metadata(), "all-in");
  ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(remote.wait_for_tag("all-in", 10s).peer, writer.name());
  EXPECT_EQ(there, here);

  // A failed transfer's wait throws its error.
  auto stale_fields = remote.metadata().fields();
  stale_fields.generation += 1;
  EXPECT_EQ(
      error_code_of([&] {
        writer.write_blocks(local, {{0, 0}}, PoolMetadata(stale_fields)).wait_for_completion(10s);
      }),
      ErrorCode::Expired);
  auto forged_fields = remote.metadata().fields();
  forged_fields.token = std::string(32, '0');
  EXPECT_EQ(
      error_code_of([&] {
        writer.write_blocks(local, {{0, 0}}, PoolMetadata(forged_fields)).wait_for_completion(10s);
      }),
      ErrorCode::AccessDenied);
  EXPECT_EQ(remote.refusals(), 1u) << "the forged token's refusal is counted once";
}

}  // namespace
