#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"
#include "support/tcp_only.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::test_support::error_code_of;

namespace {

using memwire::test_support::tcp_only;

struct OperationTest : ::testing::Test {
  Connector owner{tcp_only()};
  Connector peer{tcp_only()};
  std::vector<std::byte> source = std::vector<std::byte>(1000, std::byte{7});
  std::vector<std::byte> target = std::vector<std::byte>(1000);
  std::vector<Descriptor> source_view{Descriptor(std::span(source))};
  std::vector<Descriptor> target_view{Descriptor(std::span(target))};
};

}  // namespace

TEST_F(OperationTest, ConnectorHasARandomHexNameByDefault) {
  EXPECT_EQ(owner.name().size(), 32u);
  EXPECT_EQ(owner.name().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_FALSE(owner == peer);
  EXPECT_FALSE(owner.hostname().empty());
  EXPECT_EQ(owner.transports(), std::vector<std::string>{"tcp"});
  ConnectorOptions named = tcp_only();
  named.name = "worker-7";
  EXPECT_EQ(Connector(named).name(), "worker-7");
}

TEST_F(OperationTest, WrongPairingIsRefusedBeforeAnyByteMoves) {
  auto readable = owner.create_readable(source_view);
  auto writable = owner.create_writable(target_view);
  EXPECT_EQ(error_code_of([&] { (void)peer.begin_write(source_view, readable.metadata()); }),
            ErrorCode::Pairing);
  EXPECT_EQ(error_code_of([&] { (void)peer.begin_read(writable.metadata(), target_view); }),
            ErrorCode::Pairing);
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);
  EXPECT_EQ(writable.status(), OperationStatus::Initialized);
}

TEST_F(OperationTest, DescriptorsPairByIndexWithEqualSizes) {
  auto readable = owner.create_readable(source_view);
  std::vector<std::byte> small(999), other(1000);
  EXPECT_EQ(error_code_of([&] {
              (void)peer.begin_read(readable.metadata(), {Descriptor(std::span(small))});
            }),
            ErrorCode::SizeMismatch);
  EXPECT_EQ(error_code_of([&] {
              (void)peer.begin_read(readable.metadata(),
                                    {Descriptor(std::span(other)), Descriptor(std::span(small))});
            }),
            ErrorCode::SizeMismatch);
}

TEST_F(OperationTest, NonsenseDescriptorsAreInvalidArguments) {
  std::byte byte{};
  EXPECT_EQ(error_code_of([&] { (void)owner.create_readable({}); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)owner.create_readable({Descriptor(nullptr, 10)}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)owner.create_writable({Descriptor(&byte, 0)}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] {
              (void)owner.create_readable(
                  {Descriptor(&byte, 1), Descriptor(&byte, 1, Device::parse("cuda:0"))});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] {
              (void)owner.create_readable({Descriptor(&byte, 1, Device::parse("cuda"))});
            }),
            ErrorCode::InvalidArgument);
}

// Issue 21: the owner refuses what no reader's metadata parser would accept.
TEST_F(OperationTest, MoreDescriptorsThanMetadataAllowsAreRefusedWhereMade) {
  std::vector<std::byte> memory(RdmaMetadata::kMaxDescriptors + 1);
  std::vector<Descriptor> one_per_byte;
  for (auto& byte : memory) one_per_byte.emplace_back(&byte, 1);
  EXPECT_EQ(error_code_of([&] { (void)owner.create_readable(one_per_byte); }),
            ErrorCode::InvalidArgument);
  one_per_byte.pop_back();
  EXPECT_EQ(owner.create_readable(one_per_byte).metadata().descriptors().size(),
            RdmaMetadata::kMaxDescriptors);
}

TEST_F(OperationTest, ReadCompletesBothSidesAndReportsTheTransport) {
  auto readable = owner.create_readable(source_view);
  EXPECT_EQ(readable.kind(), OperationKind::Read);
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);
  std::promise<OperationStatus> passive_done;
  readable.on_complete([&](OperationStatus status) { passive_done.set_value(status); });
  auto read = peer.begin_read(readable.metadata(), target_view);
  EXPECT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_EQ(readable.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_EQ(passive_done.get_future().get(), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), "tcp");
  EXPECT_EQ(readable.transport(), "tcp");
  EXPECT_EQ(read.results().front().ptr(), target.data());
  EXPECT_EQ(target, source);
  // A callback added after the end runs at once.
  OperationStatus late = OperationStatus::Uninitialized;
  read.on_complete([&](OperationStatus status) { late = status; });
  EXPECT_EQ(late, OperationStatus::Complete);
}

// The owner's operation ends on memwire's thread, which runs the callback: the owner's wait
// returns only after it, so the callback may use what the waiting scope owns.
TEST_F(OperationTest, AWaitReturnsOnlyAfterTheCallbacksRan) {
  auto readable = owner.create_readable(source_view);
  std::atomic<bool> callback_done{false};
  readable.on_complete([&](OperationStatus) {
    std::this_thread::sleep_for(50ms);  // a slow callback: the waiter would return meanwhile
    callback_done = true;
  });
  auto read = peer.begin_read(readable.metadata(), target_view);
  EXPECT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_EQ(readable.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_TRUE(callback_done);
}

// The pattern the Python binding uses: a callback tells another thread the operation ended,
// which then asks for the result without waiting (0 ms). The later callbacks are still
// running: the ended operation's wait waits for them past its deadline instead of throwing
// Timeout with "status complete".
TEST_F(OperationTest, AWaitOnAnEndedOperationWaitsForItsCallbacksPastItsDeadline) {
  auto readable = owner.create_readable(source_view);
  std::promise<void> ended;
  std::atomic<bool> slow_done{false};
  readable.on_complete([&](OperationStatus) { ended.set_value(); });
  readable.on_complete([&](OperationStatus) {
    std::this_thread::sleep_for(50ms);
    slow_done = true;
  });
  auto read = peer.begin_read(readable.metadata(), target_view);
  ended.get_future().get();
  EXPECT_EQ(readable.wait_for_completion(0ms), OperationStatus::Complete);
  EXPECT_TRUE(slow_done);
  EXPECT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
}

// A callback that waits for its own operation has it at once (it is final), not a deadlock.
TEST_F(OperationTest, ACallbackMayWaitForItsOwnOperation) {
  auto readable = owner.create_readable(source_view);
  std::promise<OperationStatus> waited_inside;
  readable.on_complete([&](OperationStatus) {
    try {
      waited_inside.set_value(readable.wait_for_completion(1s));
    } catch (...) {
      waited_inside.set_exception(std::current_exception());
    }
  });
  auto read = peer.begin_read(readable.metadata(), target_view);
  EXPECT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_EQ(waited_inside.get_future().get(), OperationStatus::Complete);
}

// A callback that throws neither keeps the others from running nor the waiters from returning:
// its exception reaches whoever ended the operation (here the caller of cancel()).
TEST_F(OperationTest, ACallbackThatThrowsLeavesTheWaitsAndOtherCallbacksAlone) {
  auto readable = owner.create_readable(source_view);
  bool second_ran = false;
  readable.on_complete([](OperationStatus) { throw std::runtime_error("callback failed"); });
  readable.on_complete([&](OperationStatus) { second_ran = true; });
  EXPECT_THROW(readable.cancel(), std::runtime_error);
  EXPECT_TRUE(second_ran);
  EXPECT_EQ(error_code_of([&] { readable.wait_for_completion(2s); }), ErrorCode::Cancelled);
}

TEST_F(OperationTest, ResultsOnlyOnceComplete) {
  auto readable = owner.create_readable(source_view);
  auto metadata = readable.metadata();
  readable.cancel();  // the read can never complete: in progress, then errored
  auto read = peer.begin_read(metadata, target_view);
  EXPECT_EQ(error_code_of([&] { read.results(); }), ErrorCode::InvalidArgument);
  EXPECT_THROW(read.wait_for_completion(5s), Error);
  EXPECT_EQ(error_code_of([&] { read.results(); }), ErrorCode::InvalidArgument);
}

TEST_F(OperationTest, WaitTimesOutWithTimeoutError) {
  auto readable = owner.create_readable(source_view);
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { readable.wait_for_completion(50ms); }), ErrorCode::Timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms);
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);
}

TEST_F(OperationTest, CancelledPassiveOperationRefusesTheReader) {
  auto readable = owner.create_readable(source_view);
  auto metadata = readable.metadata();
  readable.cancel();
  EXPECT_EQ(readable.status(), OperationStatus::Cancelled);
  EXPECT_EQ(error_code_of([&] { readable.wait_for_completion(1s); }), ErrorCode::Cancelled);
  readable.cancel();  // cancelling again changes nothing
  EXPECT_EQ(readable.status(), OperationStatus::Cancelled);
  auto read = peer.begin_read(metadata, target_view);
  EXPECT_EQ(error_code_of([&] { read.wait_for_completion(5s); }), ErrorCode::NotFound);
  EXPECT_EQ(read.status(), OperationStatus::Errored);
  EXPECT_NE(read.error_message().find("no live operation"), std::string::npos);
  // Cancelling an errored operation is an error.
  EXPECT_EQ(error_code_of([&] { read.cancel(); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(target, std::vector<std::byte>(1000));
}

TEST_F(OperationTest, CancellingACompletedOperationChangesNothing) {
  auto readable = owner.create_readable(source_view);
  auto read = peer.begin_read(readable.metadata(), target_view);
  ASSERT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
  ASSERT_EQ(readable.wait_for_completion(5s), OperationStatus::Complete);
  read.cancel();
  readable.cancel();
  EXPECT_EQ(read.status(), OperationStatus::Complete);
  EXPECT_EQ(readable.status(), OperationStatus::Complete);
}

TEST_F(OperationTest, DestroyedPassiveOperationRevokesAccess) {
  std::optional<RdmaMetadata> metadata;
  {
    auto writable = owner.create_writable(target_view);
    metadata = writable.metadata();
  }
  auto write = peer.begin_write(source_view, *metadata);
  EXPECT_EQ(error_code_of([&] { write.wait_for_completion(5s); }), ErrorCode::NotFound);
  EXPECT_EQ(target, std::vector<std::byte>(1000));
}

TEST_F(OperationTest, ExpiredMetadataIsRefused) {
  ConnectorOptions options = tcp_only();
  options.metadata_ttl = 1ms;
  Connector short_lived(options);
  auto readable = short_lived.create_readable(source_view);
  auto metadata = readable.metadata();
  EXPECT_NE(metadata.expires_at_ms(), 0);
  std::this_thread::sleep_for(5ms);  // let the metadata expire
  EXPECT_EQ(error_code_of([&] { (void)peer.begin_read(metadata, target_view); }),
            ErrorCode::Expired);
}

TEST_F(OperationTest, MovedFromOperationSaysSo) {
  auto readable = owner.create_readable(source_view);
  auto moved = std::move(readable);
  EXPECT_EQ(moved.status(), OperationStatus::Initialized);
  EXPECT_EQ(error_code_of([&] { (void)readable.status(); }), ErrorCode::InvalidArgument);
}

TEST_F(OperationTest, NoSharedTransportIsAClearError) {
  auto readable = owner.create_readable(source_view);
  auto json = readable.metadata().to_json();
  auto at = json.find("\"name\":\"tcp\"");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 12, "\"name\":\"xyz\"");
  EXPECT_EQ(
      error_code_of([&] { (void)peer.begin_read(RdmaMetadata::from_json(json), target_view); }),
      ErrorCode::Transport);
}

TEST_F(OperationTest, UnreachablePeerIsPeerLost) {
  auto json = owner.create_readable(source_view).metadata().to_json();
  // The owner's listener is gone with its connector: nothing listens on port 1.
  auto at = json.find("127.0.0.1:");
  auto end = json.find('"', at);
  json.replace(at, end - at, "127.0.0.1:1");
  EXPECT_EQ(
      error_code_of([&] { (void)peer.begin_read(RdmaMetadata::from_json(json), target_view); }),
      ErrorCode::PeerLost);
}
