// What is left of a deadline, as handed to the next call of a series.
#include "memwire/clock.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Rounded down, the last part of a millisecond read as nothing left: a caller polling until
// its deadline then spun with zero timeouts (the HTTP client's wait sent wait_ms=0 polls).
TEST(LeftUntil, APartOfAMillisecondLeftIsOne) {
  const auto deadline = Clock::now() + 500us;
  const auto left = memwire::left_until(deadline);
  if (Clock::now() < deadline) {
    EXPECT_EQ(left, 1ms);
  }
}

TEST(LeftUntil, APassedDeadlineLeavesNothing) {
  EXPECT_EQ(memwire::left_until(Clock::now() - 1ms), 0ms);
  EXPECT_EQ(memwire::left_until(Clock::now()), 0ms);
}

TEST(LeftUntil, WholeMillisecondsAreKept) {
  const auto deadline = Clock::now() + 10s;
  const auto left = memwire::left_until(deadline);
  EXPECT_LE(left, 10s);
  EXPECT_GE(left, 9s);
}
