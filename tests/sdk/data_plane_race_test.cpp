// Races on the data plane seen by probes: two readers of one readable, metadata that declares
// more than the owner registered, and a reader that drops its connector the moment its read
// completes. Nothing may hang (every step runs under a deadline), and a completed read must
// complete the owner's operation too.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"

using namespace memwire;
using namespace std::chrono_literals;

namespace {

// Runs `step` on its own thread; a step still running after `deadline` is a hang, which no
// test can recover from in-process: report it and abort, so the test fails instead of hanging.
template <typename Step>
void within(std::chrono::seconds deadline, const char* what, Step step) {
  std::packaged_task<void()> task(std::move(step));
  auto done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(deadline) != std::future_status::ready) {
    std::fprintf(stderr, "HANG: %s still running after %llds\n", what,
                 static_cast<long long>(deadline.count()));
    std::fflush(stderr);
    std::abort();
  }
  runner.join();
  done.get();
}

ConnectorOptions options_for(const std::string& transport, std::size_t chunk = 1u << 20,
                             unsigned connections = 2) {
  ConnectorOptions options;
  options.transports = {transport};
  options.tcp.chunk_size = chunk;
  options.tcp.connections_per_peer = connections;
  options.connect_timeout = 2s;
  return options;
}

RdmaMetadata with_sizes(const RdmaMetadata& metadata, std::uint64_t size) {
  auto descriptors = metadata.descriptors();
  for (auto& descriptor : descriptors) descriptor.size = size;
  return RdmaMetadata(metadata.operation_kind(), descriptors, metadata.notification_key(),
                      metadata.endpoint(), metadata.token(), metadata.expires_at_ms());
}

class DataPlaneRace : public ::testing::TestWithParam<std::string> {};

// Item 2 of issue 14: the loser of two readers hung in ~Connector (its reader thread waited in
// the failing transfer's gate for pins only that thread could let go of).
TEST_P(DataPlaneRace, TwoReadersOfOneReadableBothFinishInTime) {
  constexpr std::size_t kSize = 32u << 20;
  std::vector<std::byte> source(kSize);
  test_support::fill_pattern(source, 7);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Connector owner(options_for(GetParam()));
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    auto metadata = readable.metadata();
    within(30s, "two racing readers", [&] {
      std::vector<std::byte> first(kSize), second(kSize);
      auto reader_a = std::make_unique<Connector>(options_for(GetParam()));
      auto reader_b = std::make_unique<Connector>(options_for(GetParam()));
      {
        auto read_a = reader_a->begin_read(metadata, {Descriptor(std::span(first))});
        auto read_b = reader_b->begin_read(metadata, {Descriptor(std::span(second))});
        int completed = 0;
        for (auto* read : {&read_a, &read_b}) {
          try {
            if (read->wait_for_completion(10s) == OperationStatus::Complete) ++completed;
          } catch (const Error& error) {
            EXPECT_NE(error.code(), ErrorCode::Timeout) << error.what();
          }
        }
        EXPECT_LE(completed, 1);
      }
      reader_a.reset();
      reader_b.reset();
    });
  }
}

// Same hang, when the metadata declares more bytes than the owner registered: chunks past the
// owner's end are refused while earlier ones are still out.
TEST_P(DataPlaneRace, MetadataLargerThanTheRegistrationFailsInTime) {
  constexpr std::size_t kRegistered = 4u << 20, kDeclared = 32u << 20;
  std::vector<std::byte> source(kRegistered);
  Connector owner(options_for(GetParam()));
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto forged = with_sizes(readable.metadata(), kDeclared);
  within(30s, "a read of more than the owner registered", [&] {
    std::vector<std::byte> destination(kDeclared);
    auto reader = std::make_unique<Connector>(options_for(GetParam()));
    {
      auto read = reader->begin_read(forged, {Descriptor(std::span(destination))});
      try {
        read.wait_for_completion(10s);
        ADD_FAILURE() << "a read past the owner's registration completed";
      } catch (const Error& error) {
        EXPECT_NE(error.code(), ErrorCode::Timeout) << error.what();
      }
    }
    reader.reset();
  });
}

// Item 12 of issue 14: the reader's connector going away right after its read completed must
// never turn the owner's Complete into PeerLost.
TEST_P(DataPlaneRace, ReaderLeavingRightAfterItsReadLeavesTheOwnerComplete) {
  constexpr std::size_t kSize = 2u << 20;
  std::vector<std::byte> source(kSize), destination(kSize);
  test_support::fill_pattern(source, 11);
  Connector owner(options_for(GetParam(), 256u << 10, 4));
  within(120s, "reads with connectors dropped at once", [&] {
    for (int round = 0; round < 150; ++round) {
      auto readable = owner.create_readable({Descriptor(std::span(source))});
      {
        Connector reader(options_for(GetParam(), 256u << 10, 4));
        auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(destination))});
        ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
      }
      OperationStatus status = OperationStatus::Errored;
      try {
        status = readable.wait_for_completion(10s);
      } catch (const Error& error) {
        FAIL() << "round " << round << ": the owner saw " << error.what();
      }
      ASSERT_EQ(status, OperationStatus::Complete) << "round " << round;
    }
  });
}

// Item 11 of issue 14 (core part): declared sizes are untrusted. A reader compares them with
// its own descriptors before anything else; nothing is sized after them.
TEST(UntrustedSizes, HugeOrOverflowingDeclaredSizesAreRefusedBeforeAnyTransfer) {
  Connector owner(options_for("tcp")), reader(options_for("tcp"));
  std::vector<std::byte> source(4096), first(4096), second(4096);
  auto readable =
      owner.create_readable({Descriptor(std::span(source)), Descriptor(std::span(first))});
  const auto base = readable.metadata();
  auto declared = [&](std::uint64_t a, std::uint64_t b) {
    auto descriptors = base.descriptors();
    descriptors[0].size = a;
    descriptors[1].size = b;
    return RdmaMetadata(base.operation_kind(), descriptors, base.notification_key(),
                        base.endpoint(), base.token(), base.expires_at_ms());
  };
  const std::uint64_t tebibyte = std::uint64_t{1} << 40, half = std::uint64_t{1} << 63;
  for (const auto& forged : {declared(tebibyte, 4096), declared(half, half), declared(~0ull, 2)}) {
    try {
      (void)reader.begin_read(forged,
                              {Descriptor(std::span(first)), Descriptor(std::span(second))});
      ADD_FAILURE() << "declared sizes not refused";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::SizeMismatch) << error.what();
    }
  }
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);  // the owner was never contacted
}

INSTANTIATE_TEST_SUITE_P(Transports, DataPlaneRace, ::testing::Values("tcp", "shm"));

}  // namespace
