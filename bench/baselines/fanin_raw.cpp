// Baseline: fan-in, raw. One reader asks N owner processes at once for SIZE bytes each (a
// 64 B request on each owner's kept loopback TCP connection), and reads every reply with one
// thread on epoll. What the kernel and the scheduler alone cost when one process drains many
// peers on this machine: the figure memwire's `transfer_bench fanin` compares to.
//
//   fanin_raw [--owners 1,8,32,64,256] [--size 1M] [--rounds 30] [--warmup 3]
//
// Prints one line per owner count and, on its last line, all of it as JSON.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "blocking_io.hpp"

namespace {

using namespace memwire::bench;

constexpr std::size_t kRequest = 64;

struct Options {
  std::vector<std::size_t> owners = {1, 8, 32, 64, 256};
  std::size_t size = 1u << 20;
  std::size_t rounds = 30;
  std::size_t warmup = 3;
};

void no_delay(int fd) {
  int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

// An owner answers every request with `size` bytes until the reader closes.
int own(const sockaddr_in& address, std::size_t size) {
  Socket connection(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(connection.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    return 1;
  no_delay(connection.fd());
  std::vector<char> request(kRequest), reply(size, 'r');
  while (recv_all(connection.fd(), request.data(), request.size()))
    if (!send_all(connection.fd(), reply.data(), reply.size())) return 1;
  return 0;
}

// One owner count: the owners forked, connected, then `warmup + rounds` rounds.
nlohmann::json fan_in(std::size_t owners, const Options& options) {
  Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener.fd(), static_cast<int>(owners)) != 0 ||
      ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
  std::vector<pid_t> children;
  for (std::size_t i = 0; i < owners; ++i) {
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork");
    if (child == 0) _exit(own(address, options.size));
    children.push_back(child);
  }
  std::vector<std::unique_ptr<Socket>> connections;
  Socket poller(::epoll_create1(EPOLL_CLOEXEC));
  for (std::size_t i = 0; i < owners; ++i) {
    auto& connection = connections.emplace_back(
        std::make_unique<Socket>(::accept(listener.fd(), nullptr, nullptr)));
    no_delay(connection->fd());
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = i;
    if (::epoll_ctl(poller.fd(), EPOLL_CTL_ADD, connection->fd(), &event) != 0)
      throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  // Each owner's reply lands in its own buffer, as memwire's reads land in their own.
  std::vector<std::vector<char>> buffers(owners, std::vector<char>(options.size));
  std::vector<std::size_t> received(owners);
  const std::vector<char> request(kRequest, 'q');
  std::vector<epoll_event> events(owners);
  std::vector<double> rounds_ms;
  for (std::size_t round = 0; round < options.warmup + options.rounds; ++round) {
    const auto start = Clock::now();
    for (std::size_t i = 0; i < owners; ++i) {
      received[i] = 0;
      if (!send_all(connections[i]->fd(), request.data(), request.size()))
        throw std::runtime_error("an owner went away");
    }
    std::size_t complete = 0;
    while (complete < owners) {
      const int ready = ::epoll_wait(poller.fd(), events.data(), static_cast<int>(owners), -1);
      if (ready < 0 && errno != EINTR) throw std::runtime_error("epoll_wait");
      for (int e = 0; e < ready; ++e) {
        const auto i = events[e].data.u64;
        const ssize_t n = ::recv(connections[i]->fd(), buffers[i].data() + received[i],
                                 options.size - received[i], MSG_DONTWAIT);
        if (n == 0) throw std::runtime_error("an owner went away");
        if (n < 0) continue;
        received[i] += static_cast<std::size_t>(n);
        if (received[i] == options.size) ++complete;
      }
    }
    if (round >= options.warmup) rounds_ms.push_back(seconds_since(start) * 1e3);
  }
  connections.clear();  // the owners read end-of-file and exit
  for (pid_t child : children) ::waitpid(child, nullptr, 0);
  const auto s = summarize(rounds_ms);
  const double aggregate = static_cast<double>(options.size) * owners / (s.median / 1e3) / 1e9;
  std::printf("raw fan-in owners=%-4zu round p50 %8.2f ms  p99 %8.2f ms  aggregate %.2f GB/s\n",
              owners, s.median, s.p99, aggregate);
  std::fflush(stdout);
  return {{"owners", owners},
          {"size", options.size},
          {"rounds", s.count},
          {"round_ms", {{"p50", s.median}, {"p99", s.p99}, {"max", s.max}}},
          {"aggregate_gbps", aggregate},
          {"reader_threads", 1}};
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const bool parsed = parse_options(
      argc, argv, "fanin_raw",
      {{"--owners",
        [&](const std::string& value) {
          options.owners.clear();
          for (const auto& item : split(value)) options.owners.push_back(std::stoul(item));
        }},
       {"--size", [&](const std::string& value) { options.size = parse_sizes(value).at(0); }},
       {"--rounds", [&](const std::string& value) { options.rounds = std::stoul(value); }},
       {"--warmup", [&](const std::string& value) { options.warmup = std::stoul(value); }}});
  if (!parsed) return 2;
  // Each owner is a process, and the reader holds all of them at once: bounded.
  for (std::size_t owners : options.owners)
    if (owners == 0 || owners > 1024) {
      std::fprintf(stderr, "fanin_raw: --owners takes counts from 1 to 1024\n");
      return 2;
    }
  if (options.size == 0 || options.rounds == 0) {
    std::fprintf(stderr, "fanin_raw: --size and --rounds must be at least 1\n");
    return 2;
  }
  try {
    nlohmann::json results = nlohmann::json::array();
    for (std::size_t owners : options.owners) results.push_back(fan_in(owners, options));
    std::printf("%s\n", nlohmann::json{{"fanin_raw", results}}.dump().c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fanin_raw: %s\n", error.what());
    return 1;
  }
  return 0;
}
