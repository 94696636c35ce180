// Issue 51: memwire-registry copied a document for each GET and held the copy until the reader
// took it all; 96 slow readers of one 15 MiB document took it up by 708 to 1,444 MiB. Answers
// now share the stored document, their bodies have a budget (max_sending_bytes), and a reader
// that takes longer than send_timeout over an answer is cut off. Real sockets against the
// registry process: readers that read nothing, readers that read a little now and then, and a
// fast reader that is still served meanwhile.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/built_programs.hpp"
#include "support/child_process.hpp"
#include "support/metadata_samples.hpp"
#include "support/sanitizers.hpp"

namespace {

using namespace memwire;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test_support::ChildProcess;

// Resident memory of process `pid`, in bytes.
std::size_t resident_bytes(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// A connection that asks for `path` and then reads only when told to.
class SlowReader {
 public:
  SlowReader(int port, const std::string& path) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    int small = 64 << 10;  // a small window: the server's writes block soon
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
    connected_ = connected_ && ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) ==
                                   static_cast<ssize_t>(request.size());
  }
  ~SlowReader() { ::close(fd_); }
  SlowReader(const SlowReader&) = delete;
  SlowReader& operator=(const SlowReader&) = delete;

  bool connected() const { return connected_; }
  // Takes what has arrived, at most `most` bytes; false once the server closed.
  bool take(std::size_t most) {
    std::vector<char> buffer(most);
    const auto n = ::recv(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    if (n > 0) received_ += static_cast<std::size_t>(n);
    return true;
  }
  std::size_t received() const { return received_; }
  // Reads all that comes, as fast as it comes, until the server closes (true) or sends nothing
  // for `quiet` (false: the connection is still open).
  bool drain(std::chrono::seconds quiet) {
    timeval timeout{static_cast<time_t>(quiet.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    std::vector<char> buffer(1 << 16);
    for (;;) {
      const auto n = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
      received_ += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
  bool connected_ = false;
  std::size_t received_ = 0;
};

TEST(HttpSlowReaders, ManySlowReadersOfALargeDocumentAreBoundedAndCutOff) {
  // 15 MiB: metadata of 4096 descriptors, padded with whitespace (valid JSON, stored as sent).
  auto document = test_support::sample_metadata(1, OperationKind::Read, 4096).to_json();
  document.insert(document.size() - 1, (15u << 20) - document.size(), ' ');
  ASSERT_EQ(document.size(), 15u << 20);
  constexpr std::size_t kBudget = 64u << 20;
  constexpr auto kSendTimeout = 3s;
  ChildProcess registry({memwire::test::registry_program(), "--quiet-requests", "--listen",
                         "127.0.0.1:0", "--max-body-bytes", std::to_string(16u << 20),
                         "--max-sending-bytes", std::to_string(kBudget), "--send-timeout-ms",
                         "3000"});
  const auto url = registry.read_line(10s);
  ASSERT_TRUE(url && url->starts_with("http")) << "the registry did not start";
  const int port = std::stoi(url->substr(url->rfind(':') + 1));
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(30s);
  auto put = client.Put("/v1/metadata/big", document, "application/json");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 204) << put->body;
  std::this_thread::sleep_for(200ms);
  const auto before = resident_bytes(registry.pid());

  // Peak resident memory while the readers are connected, sampled.
  std::atomic<bool> sampling{true};
  std::atomic<std::size_t> peak{before};
  std::thread sampler([&] {
    while (sampling) {
      peak = std::max(peak.load(), resident_bytes(registry.pid()));
      std::this_thread::sleep_for(20ms);
    }
  });
  // Half read nothing (cut by the 5 s a write may stall), half take 64 KiB every 100 ms: enough
  // for each write to progress, 24 s for the document, so only the send timeout cuts them.
  constexpr int kReaders = 96;
  std::vector<std::unique_ptr<SlowReader>> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.push_back(std::make_unique<SlowReader>(port, "/v1/metadata/big"));
    ASSERT_TRUE(readers.back()->connected());
  }
  const auto started = Clock::now();
  std::vector<bool> open(kReaders, true);
  bool fast_served = false;
  while (Clock::now() - started < kSendTimeout + 8s) {
    for (int i = 1; i < kReaders; i += 2)
      if (open[i]) open[i] = readers[i]->take(64 << 10);
    if (!fast_served && Clock::now() - started > 1s) {
      // A reader that takes its answer at once is served while the slow ones hold theirs.
      auto fast = client.Get("/v1/metadata/big");
      ASSERT_TRUE(fast);
      EXPECT_EQ(fast->status, 200);
      EXPECT_TRUE(fast->body == document) << "the fast reader got " << fast->body.size();
      fast_served = true;
    }
    std::this_thread::sleep_for(100ms);
  }
  sampling = false;
  sampler.join();
  const auto growth = peak.load() - before;
  std::cout << "registry RSS " << before / (1 << 20) << " MiB before, peak +" << growth / (1 << 20)
            << " MiB with " << kReaders << " slow readers of " << document.size() / (1 << 20)
            << " MiB" << std::endl;
  // Under a sanitizer the registry's RSS also holds its shadow of the document's pages and its
  // state per connection thread (96 here): TSan added about 50 MiB in its first run. Copies per
  // reader (+1,458 MiB before the budget) still fail the looser bound by far.
  const std::size_t allowed = MEMWIRE_TEST_UNDER_SANITIZER ? 3 * kBudget : kBudget;
  EXPECT_LT(growth, allowed) << "the readers' answers are not bounded by max_sending_bytes";
  EXPECT_TRUE(fast_served);
  // Every slow reader was cut off within the send timeout (and the 5 s a write may stall):
  // its connection is closed, and what it read (what the server had sent until then, drained
  // now at full speed) is short of the answer.
  int cut = 0;
  for (int i = 0; i < kReaders; ++i) {
    SCOPED_TRACE("reader " + std::to_string(i));
    const bool closed = !open[i] || readers[i]->drain(2s);
    EXPECT_TRUE(closed) << "a slow reader was not cut off";
    EXPECT_LT(readers[i]->received(), document.size());
    cut += closed && readers[i]->received() < document.size();
  }
  std::cout << cut << " of " << kReaders << " slow readers cut off" << std::endl;
  registry.kill(SIGTERM);
  EXPECT_EQ(registry.wait(10s).value_or(-1), 0);
}

}  // namespace
