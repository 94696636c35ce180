// run_on_two_cpus: both halves run, at once, and the call returns only after the helper's half
// ended, also when the caller's half throws (the helper may still be using the caller's frame).
#include "transport/shm/second_cpu.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

bool two_cpus() { return std::thread::hardware_concurrency() > 1; }

// run_on_two_cpus may decline (false, nothing run) while the helper is busy or just starting (it
// holds its lock until it parks): ask again, a bounded number of times.
template <typename Call>
bool until_it_runs(Call call) {
  for (int attempt = 0; attempt < 10000; ++attempt) {
    if (call()) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

TEST(SecondCpu, BothHalvesRunAtOnceOnTwoThreads) {
  if (!two_cpus()) GTEST_SKIP() << "one CPU: the caller does all the work";
  std::atomic<bool> first_started{false}, second_started{false};
  std::thread::id second_thread;
  auto first = [&] {
    first_started = true;
    // The two overlap: each waits (bounded) until the other began.
    for (auto until = std::chrono::steady_clock::now() + 10s;
         !second_started && std::chrono::steady_clock::now() < until;)
      std::this_thread::yield();
  };
  auto second = [&] {
    second_thread = std::this_thread::get_id();
    second_started = true;
  };
  ASSERT_TRUE(until_it_runs([&] { return run_on_two_cpus(WorkRef(first), WorkRef(second)); }));
  EXPECT_TRUE(first_started);
  EXPECT_TRUE(second_started);
  EXPECT_NE(second_thread, std::this_thread::get_id());
}

TEST(SecondCpu, AThrowingFirstHalfStillWaitsForTheSecond) {
  if (!two_cpus()) GTEST_SKIP() << "one CPU: the caller does all the work";
  std::atomic<bool> thrown{false}, second_done{false};
  auto first = [&] {
    thrown = true;
    throw std::runtime_error("first half failed");
  };
  auto second = [&] {
    for (auto until = std::chrono::steady_clock::now() + 10s;
         !thrown && std::chrono::steady_clock::now() < until;)
      std::this_thread::yield();
    std::this_thread::sleep_for(20ms);  // still running well after the first half threw
    second_done = true;
  };
  bool threw = false;
  until_it_runs([&] {
    try {
      return run_on_two_cpus(WorkRef(first), WorkRef(second));
    } catch (const std::runtime_error&) {
      threw = true;
      return true;
    }
  });
  ASSERT_TRUE(threw) << "the helper never took the work";
  EXPECT_TRUE(second_done) << "returned while the helper still ran on the caller's frame";
}
