#pragma once

// Waiting on operations in tests: for the error one ends with, for a transfer to be under way,
// and for a step that must not hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "memwire/memwire.hpp"

namespace memwire::test_support {

// The error an operation ends with; a test failure when it completes or is still running.
inline ErrorCode failure_code(Operation& operation, std::chrono::milliseconds timeout) {
  try {
    operation.wait_for_completion(timeout);
  } catch (const Error& error) {
    if (error.code() == ErrorCode::Timeout && !is_terminal(operation.status()))
      ADD_FAILURE() << "still " << to_string(operation.status()) << " after the timeout";
    return error.code();
  }
  ADD_FAILURE() << "the operation did not fail; status " << to_string(operation.status());
  return ErrorCode::Protocol;
}

// There is no event for "a peer began this operation": tests that must act mid-transfer look
// at the status until it says so.
inline bool until_in_progress(const Operation& operation, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (operation.status() != OperationStatus::InProgress) {
    if (is_terminal(operation.status()) || std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::yield();  // not a sleep: a fast host moves 256 MiB in a few ms
  }
  return true;
}

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

}  // namespace memwire::test_support
