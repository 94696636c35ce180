// fork(): a child forked after a Connector exists gets a clear error from the inherited one,
// can make and use connectors of its own, and exits without hanging on the parent's threads.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/sanitizers.hpp"

using namespace memwire;
using namespace std::chrono_literals;

namespace {

// Exit statuses of the child, one per thing it checks.
enum ChildStatus : int {
  kOk = 0,
  kInheritedWorked = 10,
  kWrongError = 11,
  kNewConnectorFailed = 12,
  kUnexpected = 13,
};

bool read_between(Connector& owner, Connector& reader) {
  std::vector<std::byte> source(1 << 16, std::byte{7});
  std::vector<std::byte> target(source.size());
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  return read.wait_for_completion(10s) == OperationStatus::Complete && target == source;
}

int child_main(std::unique_ptr<Connector> inherited) {
  try {
    std::vector<std::byte> memory(64);
    try {
      auto readable = inherited->create_readable({Descriptor(std::span(memory))});
      return kInheritedWorked;
    } catch (const Error& error) {
      if (error.code() != ErrorCode::InvalidArgument ||
          std::string(error.what()).find("fork()") == std::string::npos)
        return kWrongError;
    }
    {
      // New connectors start threads of their own (glibc reuses the parent's thread records).
      Connector owner, reader;
      if (!read_between(owner, reader)) return kNewConnectorFailed;
    }
    Connector again;    // lives until after the inherited one is gone
    inherited.reset();  // must not join the parent's threads
    return kOk;
  } catch (...) {
    return kUnexpected;
  }
}

// Waits for `pid` at most `limit`; kills it after that. The exit status, or -signal.
int wait_bounded(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -SIGKILL;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace

TEST(Fork, ChildGetsAClearErrorMakesItsOwnConnectorsAndExits) {
#if MEMWIRE_TEST_UNDER_TSAN
  // TSan itself dies when a child of a threaded process starts threads: not memwire's to test.
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a threaded fork";
#endif
  auto connector = std::make_unique<Connector>();
  Connector peer;
  ASSERT_TRUE(read_between(*connector, peer));  // the parent's threads are all running
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // child_main destroys the inherited connector itself (where the hang was); _Exit then
    // skips the leak check, which would count what the child leaves of the parent on purpose.
    std::_Exit(child_main(std::move(connector)));
  }
  EXPECT_EQ(wait_bounded(pid, 30s), kOk)
      << "10: the inherited connector worked, 11: wrong error, 12: a new connector failed, "
         "-9: hung (killed)";
  // The parent's connector is untouched by its child's exit.
  EXPECT_TRUE(read_between(*connector, peer));
}
