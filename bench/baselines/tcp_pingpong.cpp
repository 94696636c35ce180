// Baseline: a raw TCP ping-pong between two processes on loopback. The client sends SIZE bytes,
// the server echoes them; one sample is one round trip. TCP_NODELAY on both ends, blocking I/O.
//
//   tcp_pingpong [--sizes 64,4K] [--samples 10000] [--warmup 1000]
//
// Prints one line per size and, on its last line, all of it as JSON (microseconds).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "blocking_io.hpp"

namespace {

using namespace memwire::bench;

void no_delay(int fd) {
  int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

// The echoing side: the same sequence of sizes and counts as the client.
int serve(int listener, const std::vector<std::size_t>& sizes, std::size_t rounds) {
  Socket connection(::accept(listener, nullptr, nullptr));
  no_delay(connection.fd());
  for (std::size_t size : sizes) {
    std::vector<char> buffer(size);
    for (std::size_t i = 0; i < rounds; ++i) {
      if (!recv_all(connection.fd(), buffer.data(), size) ||
          !send_all(connection.fd(), buffer.data(), size))
        return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto sizes = parse_sizes("64,4K");
  std::size_t samples = 10000, warmup = 1000;
  const bool parsed =
      parse_options(argc, argv, "tcp_pingpong",
                    {{"--sizes", [&](const std::string& value) { sizes = parse_sizes(value); }},
                     {"--samples", [&](const std::string& value) { samples = std::stoul(value); }},
                     {"--warmup", [&](const std::string& value) { warmup = std::stoul(value); }}});
  if (!parsed) return 2;
  try {
    Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener.fd(), 1) != 0 ||
        ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
    // Listening before the fork: the client's connect cannot race the server's start.
    const pid_t server = ::fork();
    if (server < 0) throw std::runtime_error("fork");
    if (server == 0) _exit(serve(listener.fd(), sizes, warmup + samples));

    nlohmann::json results = nlohmann::json::array();
    {
      Socket client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::connect(client.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
        throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
      no_delay(client.fd());
      for (std::size_t size : sizes) {
        std::vector<char> out(size, 'x'), in(size);
        std::vector<double> round_trips;
        for (std::size_t i = 0; i < warmup + samples; ++i) {
          const auto start = Clock::now();
          if (!send_all(client.fd(), out.data(), size) || !recv_all(client.fd(), in.data(), size))
            throw std::runtime_error("the echo server went away");
          if (i >= warmup) round_trips.push_back(seconds_since(start) * 1e6);
        }
        const auto s = summarize(round_trips);
        std::printf("tcp ping-pong %6zu B  p50 %7.1f us  p99 %7.1f us\n", size, s.median, s.p99);
        results.push_back({{"size", size},
                           {"samples", s.count},
                           {"us",
                            {{"p50", s.median},
                             {"p90", s.p90},
                             {"p99", s.p99},
                             {"min", s.min},
                             {"max", s.max}}}});
      }
    }
    int status = 0;
    ::waitpid(server, &status, 0);
    std::printf("%s\n", nlohmann::json{{"tcp_pingpong", results}}.dump().c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tcp_pingpong: %s\n", error.what());
    return 1;
  }
  return 0;
}
