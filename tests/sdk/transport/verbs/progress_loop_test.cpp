// The verbs progress loop's work (ProgressLoop::Work): one thread at a time runs handlers and
// commands, the loop's own or one that took the work to run them itself. No RDMA device needed.
#include "transport/verbs/progress_loop.hpp"

#include <gtest/gtest.h>

#include <future>
#include <thread>

using memwire::detail::verbs::ProgressLoop;

namespace {

TEST(ProgressLoop, AThreadHoldingTheWorkRunsTheQueuedCommandsItself) {
  ProgressLoop loop;
  loop.start();
  auto work = loop.try_take_work();
  ASSERT_TRUE(work);
  EXPECT_TRUE(loop.holds_work());
  std::thread::id ran_on;
  bool nested = true;
  ASSERT_TRUE(loop.post([&] {
    ran_on = std::this_thread::get_id();
    // A command (or a callback in it) never takes the work again: it has it.
    nested = static_cast<bool>(loop.try_take_work());
  }));
  loop.run_commands();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(nested);
}

TEST(ProgressLoop, TheLoopsThreadHoldsTheWorkWhileItRunsACommand) {
  ProgressLoop loop;
  loop.start();
  std::promise<void> running, tried;
  auto tried_future = tried.get_future();
  bool held_there = false;
  ASSERT_TRUE(loop.post([&] {
    held_there = loop.holds_work() && ProgressLoop::runs_work_here();
    running.set_value();
    tried_future.wait();
  }));
  running.get_future().wait();
  EXPECT_FALSE(loop.try_take_work()) << "the work was taken from a running command";
  EXPECT_FALSE(ProgressLoop::runs_work_here());
  tried.set_value();
  EXPECT_TRUE(held_there);
  loop.stop();
}

TEST(ProgressLoop, StoppingWhileHoldingTheWorkDoesNotWaitForTheLoopsThread) {
  // A callback run by a waiter closes the connector: the loop's thread, woken by a command,
  // waits for the work this thread holds, and must not be joined (that would never return).
  ProgressLoop loop;
  loop.start();
  auto work = loop.try_take_work();
  ASSERT_TRUE(work);
  bool ran = false;
  ASSERT_TRUE(loop.post([&] { ran = true; }));
  loop.stop();
  EXPECT_TRUE(loop.stopping());
  EXPECT_FALSE(loop.post([] {})) << "a stopped loop took a command";
  loop.run_commands();
  EXPECT_FALSE(ran) << "a command ran after stop()";
}

}  // namespace
