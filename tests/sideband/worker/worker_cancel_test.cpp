// Worker::read and Worker::request given a stop token: a stop ends the call promptly with
// Error{Cancelled}, during the lookup as during the transfer, and no byte lands in the caller's
// memory after it returns. Over a real HTTP endpoint and a real nats-server.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <future>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "memwire/sideband/worker.hpp"
#include "sideband/conformance/channel_world.hpp"
#include "sideband/worker/owner_and_peer.hpp"
#include "support/channels.hpp"
#include "support/test_peer_process.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = 20s;  // what a call would wait without the stop

// The reader is the peer: its bytes come over a socket from the (stoppable) owner.
class WorkerCancelTest : public OwnerAndPeerChannels {
 protected:
  void SetUp() override {
    OwnerAndPeerChannels::SetUp();
    owner_ = std::make_unique<Worker>(owner_connector_, *owner_channel_);
    reader_ = std::make_unique<Worker>(*peer_connector_, *peer_channel_);
  }

  // Runs `call`, requesting a stop once `when` is ready; returns the error's code and message
  // (Ok when it returned) and how long it took.
  struct Ended {
    std::optional<ErrorCode> code;
    std::string message;
    Clock::duration took;
  };
  template <typename Call>
  static Ended run_stopped(Call call, std::shared_future<void> when) {
    std::stop_source stop;
    std::jthread stopper([&stop, when] {
      when.wait();
      stop.request_stop();
    });
    Ended ended;
    const auto started = Clock::now();
    try {
      call(stop.get_token());
    } catch (const Error& error) {
      ended.code = error.code();
      ended.message = error.what();
    }
    ended.took = Clock::now() - started;
    return ended;
  }

  // Ready `delay` from now.
  static std::shared_future<void> after(std::chrono::milliseconds delay) {
    return std::async(std::launch::async, [delay] { std::this_thread::sleep_for(delay); }).share();
  }

  std::chrono::milliseconds prompt() const { return world_->abandon_bound() + 1500ms; }

  Connector owner_connector_;
  std::unique_ptr<Worker> owner_;
  std::unique_ptr<Worker> reader_;
};

TEST_P(WorkerCancelTest, AStopEndsTheWaitForANameAtOnce) {
  std::vector<std::byte> target(4096);
  auto ended = run_stopped(
      [&](std::stop_token stop) {
        (void)reader_->read("t.never", {Descriptor(std::span(target))}, kTimeout,
                            Worker::Lookup::WaitUntilPublished, stop);
      },
      after(200ms));
  EXPECT_EQ(ended.code, ErrorCode::Cancelled) << ended.message;
  EXPECT_LT(ended.took, prompt());
}

TEST_P(WorkerCancelTest, AStoppedReadFetchesNothing) {
  std::vector<std::byte> source(4096, std::byte{7}), target(4096);
  auto lease = owner_->publish("t.there", {Descriptor(std::span(source))});
  std::stop_source stop;
  stop.request_stop();
  try {
    (void)reader_->read("t.there", {Descriptor(std::span(target))}, kTimeout, Worker::Lookup::Fetch,
                        stop.get_token());
    ADD_FAILURE() << "a stopped read completed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Cancelled) << error.what();
  }
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](auto b) { return b == std::byte{0}; }));
}

// The owner is another process, SIGSTOPped: the transfer hangs until the stop cancels it. Then
// the owner goes on (answers the reads it was asked for): none of it may reach the buffer.
TEST_P(WorkerCancelTest, AStopCancelsASlowTransferAndNoByteLandsAfter) {
  constexpr std::size_t kSize = 64u << 20;
  auto owner = test_support::start_test_peer({"publish", "readable", std::to_string(kSize), "5"});
  auto metadata = RdmaMetadata::from_json(test_support::expect_line(owner));
  owner_channel_->publish("t.slow", metadata, 0ms);
  owner.kill(SIGSTOP);
  std::vector<std::byte> target(kSize);
  auto ended = run_stopped(
      [&](std::stop_token stop) {
        (void)reader_->read("t.slow", {Descriptor(std::span(target))}, kTimeout,
                            Worker::Lookup::Fetch, stop);
      },
      after(500ms));  // the lookup is one round trip on this host: the transfer by then
  EXPECT_EQ(ended.code, ErrorCode::Cancelled) << ended.message;
  EXPECT_NE(ended.message.find("during the transfer"), std::string::npos) << ended.message;
  EXPECT_LT(ended.took, prompt());
  // The caller owns its memory again: mark it, let the owner send what it was asked for.
  std::fill(target.begin(), target.end(), std::byte{0xEE});
  owner.kill(SIGCONT);
  (void)owner.read_line(1s);  // it sends, then waits for a read that never completes
  EXPECT_EQ(std::count(target.begin(), target.end(), std::byte{0xEE}),
            static_cast<std::ptrdiff_t>(kSize))
      << "bytes landed after the read returned";
  owner.kill(SIGKILL);
  owner.wait(10s);
}

// The owner holds the requester's metadata and writes only after the requester gave up: its
// write is refused and the requester's memory stays as it was.
TEST_P(WorkerCancelTest, AStoppedRequestRevokesTheOwnersAccess) {
  std::promise<void> asked, requester_returned;
  auto asked_future = asked.get_future().share();
  auto returned = requester_returned.get_future().share();
  std::promise<std::optional<ErrorCode>> late_write;
  std::vector<std::byte> source(4096, std::byte{9});
  auto subscription =
      owner_channel_->serve("emb", [&](const std::string&, const RdmaMetadata& writable) {
        asked.set_value();
        returned.wait_for(30s);
        std::optional<ErrorCode> outcome;
        try {
          owner_connector_.begin_write({Descriptor(std::span(source))}, writable)
              .wait_for_completion(5s);
        } catch (const Error& error) {
          outcome = error.code();
        }
        late_write.set_value(outcome);
        throw Error(ErrorCode::NotFound, "gone");
      });
  std::vector<std::byte> target(4096);
  auto ended = run_stopped(
      [&](std::stop_token stop) {
        (void)reader_->request("emb.x", {Descriptor(std::span(target))}, kTimeout, stop);
      },
      asked_future);
  requester_returned.set_value();
  EXPECT_EQ(ended.code, ErrorCode::Cancelled) << ended.message;
  EXPECT_LT(ended.took, prompt());
  auto late = late_write.get_future();
  ASSERT_EQ(late.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(late.get().has_value()) << "the owner wrote after the request returned";
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](auto b) { return b == std::byte{0}; }));
}

INSTANTIATE_TEST_SUITE_P(Channels, WorkerCancelTest,
                         ::testing::ValuesIn(memwire::test_support::enabled_channels()),
                         [](const auto& info) { return info.param; });

}  // namespace
