// StreamOptions::busy_poll: after serving a peer's frame, the event loop polls for a while
// before it sleeps (so that the next request needs no wake-up), and then does sleep. Measured by
// the CPU time the loop threads spend: a polling loop spends about its window, a sleeping one
// next to nothing.
#include <dirent.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/tcp_only.hpp"
#include "transport/stream/event_loop.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

std::chrono::nanoseconds cpu_time(clockid_t clock) {
  timespec spent{};
  ::clock_gettime(clock, &spent);
  return std::chrono::seconds(spent.tv_sec) + std::chrono::nanoseconds(spent.tv_nsec);
}

// The CPU time spent so far by this process's threads named `name` (/proc: schedstat's first
// field, nanoseconds on a CPU).
std::chrono::nanoseconds cpu_time_of_threads(const std::string& name) {
  std::chrono::nanoseconds total{};
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return total;
  while (const dirent* entry = ::readdir(tasks)) {
    const std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::string comm;
    std::getline(std::ifstream(task + "/comm"), comm);
    if (comm != name) continue;
    long long ns = 0;
    if (std::ifstream(task + "/schedstat") >> ns) total += std::chrono::nanoseconds(ns);
  }
  ::closedir(tasks);
  return total;
}

// The loop thread's CPU clock, asked on that thread; with poll_a_while() called there first when
// `poll`.
clockid_t loop_clock(EventLoop& loop, bool poll) {
  std::promise<clockid_t> clock;
  loop.post([&] {
    clockid_t id{};
    ::pthread_getcpuclockid(::pthread_self(), &id);
    if (poll) loop.poll_a_while();
    clock.set_value(id);
  });
  return clock.get_future().get();
}

}  // namespace

TEST(BusyPoll, ALoopPollsForItsWindowAfterPollAWhileThenSleeps) {
  EventLoop loop("busy-poll-test", 40ms);
  const auto clock = loop_clock(loop, true);
  const auto start = cpu_time(clock);
  std::this_thread::sleep_for(30ms);
  // Polling, it ran for much of that (not all: a loaded machine shares its CPUs).
  EXPECT_GE(cpu_time(clock) - start, 8ms);
  std::this_thread::sleep_for(30ms);  // the window ends
  const auto after_window = cpu_time(clock);
  std::this_thread::sleep_for(60ms);
  EXPECT_LT(cpu_time(clock) - after_window, 4ms) << "still polling after its window";
}

TEST(BusyPoll, ALoopWithoutAWindowSleepsAtOnce) {
  EventLoop loop("busy-poll-test");
  const auto clock = loop_clock(loop, true);
  const auto start = cpu_time(clock);
  std::this_thread::sleep_for(40ms);
  EXPECT_LT(cpu_time(clock) - start, 4ms);
}

// An owner's loop polls after it served a READ (the request is a frame from its peer); the
// reader's, with no window, does not; with the owner's window zero, nothing polls.
TEST(BusyPoll, AnOwnersLoopPollsAfterServingARequest) {
  const auto loops_cpu_after_a_read = [](std::chrono::microseconds owner_window) {
    auto owner_options = test_support::tcp_only();
    owner_options.stream.io_threads = 1;
    owner_options.stream.busy_poll = owner_window;
    auto reader_options = test_support::tcp_only();
    reader_options.stream.io_threads = 1;
    reader_options.stream.busy_poll = 0us;
    Connector owner(owner_options), reader(reader_options);
    // Twice: the first READ's request may be read together with the connection's first frame,
    // and an owner polls only after a request that came alone.
    for (int round = 0; round < 2; ++round) {
      std::vector<std::byte> source(4096, std::byte(7 + round)), target(4096);
      auto readable = owner.create_readable({Descriptor(std::span(source))});
      auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
      EXPECT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
      EXPECT_EQ(target, source);
    }
    const auto start = cpu_time_of_threads("memwire-tcp");
    std::this_thread::sleep_for(40ms);
    return cpu_time_of_threads("memwire-tcp") - start;
  };
  // 10 ms, the most a connector takes. A loaded machine may give the polling thread little of
  // a CPU in one try: the best of three counts, for either way.
  const auto best_of_three = [&](std::chrono::microseconds window, auto better) {
    auto best = loops_cpu_after_a_read(window);
    for (int i = 0; i < 2; ++i) best = std::min(best, loops_cpu_after_a_read(window), better);
    return best;
  };
  EXPECT_GE(best_of_three(std::chrono::microseconds(1'000'000), std::greater<>()), 3ms);
  EXPECT_LT(best_of_three(0us, std::less<>()), 3ms);
}

TEST(BusyPoll, TheEnvironmentSetsTheWindow) {
  ::setenv("MEMWIRE_BUSY_POLL_US", "125", 1);
  const auto options = ConnectorOptions::from_environment();
  ::unsetenv("MEMWIRE_BUSY_POLL_US");
  EXPECT_EQ(options.stream.busy_poll, 125us);
  EXPECT_EQ(ConnectorOptions::from_environment().stream.busy_poll,
            ConnectorOptions{}.stream.busy_poll);
}
