// StreamOptions::busy_poll: after serving a peer's frame, the event loop polls for a while
// before it sleeps (so that the next request needs no wake-up), and then does sleep. Counted by
// the loop's turns that polled instead of sleeping (test_hooks::busy_polls), not by CPU time: a
// loaded machine may give a polling thread little of a CPU, but every turn it gets is counted.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/tcp_only.hpp"
#include "transport/stream/event_loop.hpp"
#include "util/test_hooks.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

std::uint64_t busy_polls() { return test_hooks::busy_polls.load(); }

// Runs poll_a_while() on the loop's thread; returns once it ran.
void poll_a_while_on(EventLoop& loop) {
  std::promise<void> ran;
  loop.post([&] {
    loop.poll_a_while();
    ran.set_value();
  });
  ran.get_future().get();
}

// Waits up to 10 s for busy_polls() to pass `count`: a polling loop's next turn polls, however
// little CPU it is given.
bool polls_pass(std::uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (busy_polls() <= count && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  return busy_polls() > count;
}

}  // namespace

TEST(BusyPoll, ALoopPollsForItsWindowAfterPollAWhileThenSleeps) {
  EventLoop loop("busy-poll-test", 40ms);
  const auto before = busy_polls();
  const auto asked = std::chrono::steady_clock::now();
  poll_a_while_on(loop);
  EXPECT_TRUE(polls_pass(before)) << "no turn polled after poll_a_while()";
  // Once the window is over, the turn under way may still poll once; then it sleeps.
  std::this_thread::sleep_until(asked + 40ms + 20ms);
  const auto after_window = busy_polls();
  std::this_thread::sleep_for(60ms);
  EXPECT_LE(busy_polls() - after_window, 1u) << "still polling after its window";
}

TEST(BusyPoll, ALoopWithoutAWindowSleepsAtOnce) {
  const auto before = busy_polls();
  {
    EventLoop loop("busy-poll-test");
    poll_a_while_on(loop);
    std::this_thread::sleep_for(40ms);
  }
  EXPECT_EQ(busy_polls(), before);
}

// An owner's loop polls after it served a READ (the request is a frame from its peer); the
// reader's, with no window, does not; with the owner's window zero, nothing polls.
TEST(BusyPoll, AnOwnersLoopPollsAfterServingARequest) {
  // The polls counted from before the second READ to the connectors' end.
  const auto polls_after_a_read = [](std::chrono::microseconds owner_window) {
    auto owner_options = test_support::tcp_only();
    owner_options.stream.io_threads = 1;
    owner_options.stream.busy_poll = owner_window;
    auto reader_options = test_support::tcp_only();
    reader_options.stream.io_threads = 1;
    reader_options.stream.busy_poll = 0us;
    Connector owner(owner_options), reader(reader_options);
    std::uint64_t before = 0;
    // Twice: the first READ's request may be read together with the connection's first frame,
    // and an owner polls only after a request that came alone.
    for (int round = 0; round < 2; ++round) {
      before = busy_polls();
      std::vector<std::byte> source(4096, std::byte(7 + round)), target(4096);
      auto readable = owner.create_readable({Descriptor(std::span(source))});
      auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
      EXPECT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
      EXPECT_EQ(target, source);
    }
    if (owner_window.count() > 0) {
      EXPECT_TRUE(polls_pass(before)) << "the owner never polled";
    }
    std::this_thread::sleep_for(20ms);
    return busy_polls() - before;
  };
  // 10 ms, the most a connector takes.
  EXPECT_GT(polls_after_a_read(std::chrono::microseconds(1'000'000)), 0u);
  EXPECT_EQ(polls_after_a_read(0us), 0u);
}

TEST(BusyPoll, TheEnvironmentSetsTheWindow) {
  ::setenv("MEMWIRE_BUSY_POLL_US", "125", 1);
  const auto options = ConnectorOptions::from_environment();
  ::unsetenv("MEMWIRE_BUSY_POLL_US");
  EXPECT_EQ(options.stream.busy_poll, 125us);
  EXPECT_EQ(ConnectorOptions::from_environment().stream.busy_poll,
            ConnectorOptions{}.stream.busy_poll);
}
