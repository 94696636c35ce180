// The test support's NatsServer never loses its port to another bind (issue 44, item 8: the
// NatsChannelNkey.SeedFileAuthenticates flake, about 1 run in 300 in CI; 1 in 1,800 here with
// three copies of that test side by side). The support picked a free port with bind(0), closed
// it and wrote it into the server's configuration; the server binds it only after starting
// JetStream, and any bind(0) on the machine in between (another test's server, a connector's
// listener) could take it: "bind: address already in use", the server exits, the test fails.
// Here a thread keeps taking loopback ports with bind(0), holding thousands, while servers
// start: 3 to 7 of 20 starts failed so. Now each server chooses its own port and says which.
// Its own binary, run alone (RUN_SERIAL): the port taker would take other tests' ports too.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/nats_server.hpp"

using memwire::test_support::NatsServer;

TEST(NatsServerPort, AStartNeverLosesItsPortToAnotherBind) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 8192);
  ::setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GT(files.rlim_cur, 512u) << "too few file descriptors to hold ports with";
  const std::size_t hold = files.rlim_cur - 256;
  std::atomic<bool> stop{false};
  std::thread taker([&] {
    std::deque<int> held;
    while (!stop.load(std::memory_order_relaxed)) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        held.push_back(fd);
      } else if (fd >= 0) {
        ::close(fd);
      }
      if (held.size() > hold || (fd < 0 && !held.empty())) {
        ::close(held.front());
        held.pop_front();
      }
    }
    for (int fd : held) ::close(fd);
  });
  int failed = 0;
  std::string first;
  for (int start = 0; start < 20; ++start) {
    try {
      NatsServer server;
    } catch (const std::runtime_error& error) {
      if (failed++ == 0) first = error.what();
    }
  }
  stop = true;
  taker.join();
  EXPECT_EQ(failed, 0) << "of 20 starts; the first: " << first;
}
