// Every transport ends an operation the same way on both sides: racing readers, a reader that
// leaves at once, a cancel on either side in the middle of a transfer, a peer process killed,
// an owner that is gone. Each failure reaches both sides, in time, with its reason.
#include <csignal>
#include <future>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/child_process.hpp"
#include "support/sanitizers.hpp"
#include "support/test_peer_process.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

class LifecycleConformance : public TransportConformance {
 protected:
  // Large and slow enough to act in the middle of: Soft-RoCE under TCG moves about 20 MiB/s,
  // the stream transports are held to small requests. A sanitizer slows 4 KiB requests
  // (slow_options) enough for a quarter of the size (256 MiB took 5-20 s there); a writer's 4
  // MiB requests it slows less.
  std::size_t mid_transfer_size(bool small_requests = true) const {
    if (transport() == "verbs") return 64u << 20;
    return MEMWIRE_TEST_UNDER_SANITIZER && small_requests ? 64u << 20 : 256u << 20;
  }
  ConnectorOptions slow_options() const { return options(4096, 1); }
};

// A read of an owner that is (or is about to be, once `begun` ran) gone fails as lost: at its
// start (a transport that asks the owner first: shm's probe) or within its wait.
template <typename Begun>
void expect_read_lost(Connector& reader, const RdmaMetadata& metadata,
                      std::vector<std::byte>& target, Begun begun) {
  try {
    auto read = reader.begin_read(metadata, {Descriptor(std::span(target))});
    begun();
    const auto code = failure_code(read, 20s);
    EXPECT_TRUE(code == ErrorCode::PeerLost || code == ErrorCode::Timeout) << to_string(code);
  } catch (const Error& error) {
    EXPECT_TRUE(error.code() == ErrorCode::PeerLost || error.code() == ErrorCode::Transport)
        << error.what();
  }
}

TEST_P(LifecycleConformance, TwoReadersOfOneReadableBothFinishInTime) {
  constexpr std::size_t kSize = 32u << 20;
  std::vector<std::byte> source(kSize);
  fill_pattern(source, 7);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Connector owner(options());
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    auto metadata = readable.metadata();
    within(60s, "two racing readers", [&] {
      std::vector<std::byte> first(kSize), second(kSize);
      auto reader_a = std::make_unique<Connector>(options());
      auto reader_b = std::make_unique<Connector>(options());
      {
        auto read_a = reader_a->begin_read(metadata, {Descriptor(std::span(first))});
        auto read_b = reader_b->begin_read(metadata, {Descriptor(std::span(second))});
        int completed = 0;
        for (auto* read : {&read_a, &read_b}) {
          try {
            if (read->wait_for_completion(30s) == OperationStatus::Complete) ++completed;
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

// The reader's connector going away right after its read completed must never turn the
// owner's Complete into PeerLost.
TEST_P(LifecycleConformance, AReaderLeavingRightAfterItsReadLeavesTheOwnerComplete) {
  constexpr std::size_t kSize = 2u << 20;
  std::vector<std::byte> source(kSize), destination(kSize);
  fill_pattern(source, 11);
  Connector owner(options(256u << 10, 4));
  const int rounds = transport() == "verbs" ? 30 : 150;
  within(180s, "reads with connectors dropped at once", [&] {
    for (int round = 0; round < rounds; ++round) {
      auto readable = owner.create_readable({Descriptor(std::span(source))});
      {
        Connector reader(options(256u << 10, 4));
        auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(destination))});
        ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
      }
      OperationStatus status = OperationStatus::Errored;
      try {
        status = readable.wait_for_completion(30s);
      } catch (const Error& error) {
        FAIL() << "round " << round << ": the owner saw " << error.what();
      }
      ASSERT_EQ(status, OperationStatus::Complete) << "round " << round;
    }
  });
}

TEST_P(LifecycleConformance, AnOwnerCancelInTheMiddleFailsTheReaderAndServesOthers) {
  Connector owner(slow_options()), reader(slow_options());
  std::vector<std::byte> source(mid_transfer_size()), target(mid_transfer_size());
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  // Watched from before the read begins: on a fast host the whole transfer may be over by the
  // time begin_read (which sends every request) returns.
  auto cancelled = std::async(std::launch::async, [&] {
    if (!until_in_progress(readable, 30s)) return std::chrono::nanoseconds::max();
    const auto began = std::chrono::steady_clock::now();
    readable.cancel();
    return std::chrono::steady_clock::now() - began;
  });
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  const auto took = cancelled.get();
  if (took == std::chrono::nanoseconds::max()) {
    ASSERT_EQ(readable.status(), OperationStatus::Complete) << "never began";
    GTEST_SKIP() << "the transfer finished before the test could act in its middle";
  }
  EXPECT_LT(took, 1s) << "cancel waited for the reader";
  EXPECT_EQ(readable.status(), OperationStatus::Cancelled);
  try {
    if (read.wait_for_completion(30s) == OperationStatus::Complete)
      GTEST_SKIP() << "the read finished before the owner cancelled";
  } catch (const Error&) {
  }
  const auto code = failure_code(read, 1s);
  EXPECT_TRUE(code == ErrorCode::AccessDenied || code == ErrorCode::Cancelled ||
              code == ErrorCode::NotFound || code == ErrorCode::PeerLost)
      << to_string(code) << ": " << read.error_message();
  // The owner's connector still serves others.
  std::vector<std::byte> small(4096), copy(4096);
  fill_pattern(small, 31);
  auto again = owner.create_readable({Descriptor(std::span(small))});
  auto second = reader.begin_read(again.metadata(), {Descriptor(std::span(copy))});
  EXPECT_EQ(second.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(copy, 31), copy.size());
}

TEST_P(LifecycleConformance, AReaderCancelInTheMiddleReachesTheOwner) {
  Connector owner(slow_options()), reader(slow_options());
  std::vector<std::byte> source(mid_transfer_size()), target(mid_transfer_size());
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  if (!until_in_progress(readable, 30s)) {
    ASSERT_EQ(readable.status(), OperationStatus::Complete) << "never began";
    GTEST_SKIP() << "the transfer finished before the test could act in its middle";
  }
  read.cancel();
  if (read.status() == OperationStatus::Complete) GTEST_SKIP() << "the read finished first";
  EXPECT_EQ(read.status(), OperationStatus::Cancelled);
  EXPECT_EQ(failure_code(readable, 30s), ErrorCode::Cancelled) << readable.error_message();
  EXPECT_NE(readable.error_message().find("active side"), std::string::npos)
      << readable.error_message();
}

TEST_P(LifecycleConformance, AnotherProcessReadsAndWritesEveryByte) {
  if (!claims().other_processes) GTEST_SKIP() << transport() << " reaches no other process";
  constexpr std::size_t kSize = 16u << 20;
  {
    auto owner =
        start_test_peer({"publish", "readable", std::to_string(kSize), "21"}, peer_environment());
    auto metadata = RdmaMetadata::from_json(expect_line(owner));
    Connector connector(options());
    std::vector<std::byte> target(kSize);
    auto read = connector.begin_read(metadata, {Descriptor(std::span(target))});
    EXPECT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
    EXPECT_EQ(read.transport(), transport());
    EXPECT_EQ(first_mismatch(target, 21), kSize);
    EXPECT_EQ(expect_line(owner), "complete " + transport());
    EXPECT_EQ(owner.wait(10s), 0);
  }
  Connector connector(options());
  std::vector<std::byte> memory(kSize);
  auto writable = connector.create_writable({Descriptor(std::span(memory))});
  auto writer =
      start_test_peer({"active", "write", std::to_string(kSize), "22"}, peer_environment());
  writer.write_line(writable.metadata().to_json());
  EXPECT_EQ(expect_line(writer), "begun");
  EXPECT_EQ(expect_line(writer), "complete " + transport());
  EXPECT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.transport(), transport());
  EXPECT_EQ(first_mismatch(memory, 22), kSize);
  EXPECT_EQ(writer.wait(10s), 0);
}

TEST_P(LifecycleConformance, AKilledReaderFailsTheOwner) {
  if (!claims().other_processes) GTEST_SKIP() << transport() << " reaches no other process";
  Connector connector(options());
  std::vector<std::byte> memory(mid_transfer_size());
  auto readable = connector.create_readable({Descriptor(std::span(memory))});
  auto child = start_test_peer({"active", "read", std::to_string(memory.size()), "24", "4096"},
                               peer_environment());
  child.write_line(readable.metadata().to_json());
  if (!until_in_progress(readable, 30s)) {
    ASSERT_EQ(readable.status(), OperationStatus::Complete) << "never began";
    GTEST_SKIP() << "the transfer finished before the test could act in its middle";
  }
  child.kill(SIGSTOP);  // it cannot finish now
  child.kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  try {
    if (readable.wait_for_completion(20s) == OperationStatus::Complete)
      GTEST_SKIP() << "the read finished before the reader was stopped";
  } catch (const Error&) {
  }
  EXPECT_EQ(failure_code(readable, 1s), ErrorCode::PeerLost) << readable.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 15s);
}

TEST_P(LifecycleConformance, AKilledOwnerFailsTheReader) {
  if (!claims().other_processes) GTEST_SKIP() << transport() << " reaches no other process";
  auto child = start_test_peer({"publish", "readable", std::to_string(mid_transfer_size()), "25"},
                               peer_environment());
  auto metadata = RdmaMetadata::from_json(expect_line(child));
  Connector connector(slow_options());
  std::vector<std::byte> target(mid_transfer_size());
  child.kill(SIGSTOP);  // the read is certainly in flight when the owner dies
  const auto began = std::chrono::steady_clock::now();
  // Killed from aside, a moment after the read began: shm's probe blocks begin_read on the
  // stopped owner, and used to wait out its 5 s timeout before the kill came.
  auto killer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    child.kill(SIGKILL);
  });
  expect_read_lost(connector, metadata, target, [&] { killer.wait(); });
  EXPECT_LT(std::chrono::steady_clock::now() - began, 15s);
}

TEST_P(LifecycleConformance, AnOwnerThatIsGoneFailsTheReaderWithinTheTimeout) {
  std::optional<RdmaMetadata> metadata;
  std::vector<std::byte> source(4096), target(4096);
  {
    Connector owner(options());
    metadata = owner.create_readable({Descriptor(std::span(source))}).metadata();
  }  // the owner and its listener are gone
  Connector reader(options());
  const auto began = std::chrono::steady_clock::now();
  expect_read_lost(reader, *metadata, target, [] {});
  EXPECT_LT(std::chrono::steady_clock::now() - began, 15s);
}

MEMWIRE_CONFORMANCE_SUITE(LifecycleConformance);

}  // namespace

namespace {

// A writer that stops in the middle of its payload (a cut link: no end, no more bytes) must
// not keep the owner's memory: dropping the writable returns within the connector's grace.
TEST_P(LifecycleConformance, AStalledWriterLetsTheOwnerDropItsWritableInTime) {
  if (!claims().other_processes) GTEST_SKIP() << transport() << " reaches no other process";
  auto writable_owner = std::make_unique<Connector>(options());
  std::vector<std::byte> memory(mid_transfer_size(false));
  auto writable = std::make_unique<WritableOperation>(
      writable_owner->create_writable({Descriptor(std::span(memory))}));
  auto child = start_test_peer({"active", "write", std::to_string(memory.size()), "26", "4194304"},
                               peer_environment());
  child.write_line(writable->metadata().to_json());
  if (!until_in_progress(*writable, 30s)) {
    ASSERT_EQ(writable->status(), OperationStatus::Complete) << "never began";
    GTEST_SKIP() << "the transfer finished before the writer could be stopped";
  }
  child.kill(SIGSTOP);
  std::this_thread::sleep_for(200ms);  // whatever it had sent has arrived
  const auto dropped = std::chrono::steady_clock::now();
  within(60s, "dropping a writable whose writer stalled", [&] { writable.reset(); });
  EXPECT_LT(std::chrono::steady_clock::now() - dropped, options().connect_timeout + 2s);
  child.kill(SIGKILL);
}

}  // namespace
