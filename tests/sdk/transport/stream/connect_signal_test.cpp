// connect_tcp waits for a slow handshake until its deadline, whatever signals the process gets
// meanwhile: a profiler's or an interpreter's signal handler must not fail a dial at once.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "memwire/error.hpp"
#include "transport/stream/socket.hpp"

using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

void ignore_signal(int) {}

}  // namespace

TEST(ConnectTcp, SignalsDuringTheHandshakeWaitDoNotEndItEarly) {
  // A listener whose accept queue is full drops further SYNs: the next connect stays pending.
  FileDescriptor listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener.get(), 0), 0);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  const HostPort peer{"127.0.0.1", ntohs(address.sin_port)};
  auto queued = connect_tcp(peer, 1s);  // fills the queue (it holds backlog + 1)

  struct sigaction handler {};
  struct sigaction previous {};
  handler.sa_handler = ignore_signal;  // no SA_RESTART: poll() would return EINTR
  ASSERT_EQ(::sigaction(SIGUSR1, &handler, &previous), 0);
  std::atomic<bool> dialling{true};
  const pthread_t dialler = ::pthread_self();
  std::thread interrupter([&] {
    while (dialling.load()) {
      ::pthread_kill(dialler, SIGUSR1);
      std::this_thread::sleep_for(20ms);
    }
  });

  constexpr auto kTimeout = 400ms;
  const auto began = std::chrono::steady_clock::now();
  std::string what;
  try {
    auto pending = connect_tcp(peer, kTimeout);
    what = "connected";  // the queue was not full: the test's premise broke, and it says so
  } catch (const memwire::Error& error) {
    what = error.what();
  }
  const auto waited = std::chrono::steady_clock::now() - began;
  dialling = false;
  interrupter.join();
  ::sigaction(SIGUSR1, &previous, nullptr);

  EXPECT_NE(what.find("timed out"), std::string::npos) << what;
  EXPECT_GE(waited, kTimeout - 10ms);
}
