// Baseline: what a READ does, raw. A client sends a small request (REQUEST bytes), a server
// process answers with REPLY bytes; one kept connection, blocking I/O, TCP_NODELAY on TCP. Over
// loopback TCP (memwire's tcp transport) and over a Unix socket (the socket memwire's shm
// transport uses for its requests).
//
//   request_reply [--socket tcp|unix] [--request 64] [--reply 4K] [--samples 10000]
//                 [--warmup 1000] [--depth 1,64] [--pipelined-ops 100000] [--spin 0|1]
//
// --spin 1: both sides poll their socket with non-blocking reads instead of sleeping in recv (the
// floor under a reader and an owner that busy-poll, as memwire's waiters and loops do).
//
// depth 1: one request at a time, each round trip a sample (microseconds).
// depth N: N requests in flight (the client sends N, then one more per reply it reads), timed
// over --pipelined-ops requests: operations per second, and CPU time per operation of each
// process (getrusage: the client's own, the server's from wait4).
// Prints one line per figure and, on its last line, all of it as JSON.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
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

struct Options {
  std::string socket = "tcp";
  std::size_t request = 64;
  std::size_t reply = 4096;
  std::size_t samples = 10000;
  std::size_t warmup = 1000;
  std::vector<std::size_t> depths = {1, 64};
  std::size_t pipelined_ops = 100000;
  bool spin = false;
};

// The server answers every request it reads until the client closes.
int serve(int listener, const Options& options, bool tcp) {
  Socket connection(::accept(listener, nullptr, nullptr));
  if (tcp) {
    int on = 1;
    ::setsockopt(connection.fd(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
  std::vector<char> request(options.request), reply(options.reply, 'r');
  while (recv_all(connection.fd(), request.data(), request.size(), options.spin)) {
    if (!send_all(connection.fd(), reply.data(), reply.size())) return 1;
  }
  return 0;
}

double cpu_seconds(const rusage& usage) {
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const bool parsed = parse_options(
      argc, argv, "request_reply",
      {{"--socket", [&](const std::string& value) { options.socket = value; }},
       {"--request", [&](const std::string& value) { options.request = parse_sizes(value).at(0); }},
       {"--reply", [&](const std::string& value) { options.reply = parse_sizes(value).at(0); }},
       {"--samples", [&](const std::string& value) { options.samples = std::stoul(value); }},
       {"--warmup", [&](const std::string& value) { options.warmup = std::stoul(value); }},
       {"--depth",
        [&](const std::string& value) {
          options.depths.clear();
          for (const auto& item : split(value)) options.depths.push_back(std::stoul(item));
        }},
       {"--pipelined-ops",
        [&](const std::string& value) { options.pipelined_ops = std::stoul(value); }},
       {"--spin", [&](const std::string& value) { options.spin = value == "1"; }}});
  if (!parsed) return 2;
  const bool tcp = options.socket == "tcp";
  if (!tcp && options.socket != "unix") {
    std::fprintf(stderr, "request_reply: --socket is tcp or unix\n");
    return 2;
  }
  try {
    // One server process per depth: wait4 then gives each figure its own CPU time.
    nlohmann::json results = nlohmann::json::array();
    for (std::size_t depth : options.depths) {
      const int family = tcp ? AF_INET : AF_UNIX;
      Socket listener(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_storage address{};
      socklen_t length = 0;
      if (tcp) {
        auto* in = reinterpret_cast<sockaddr_in*>(&address);
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        length = sizeof *in;
      } else {
        // An abstract name: nothing left on disk.
        auto* un = reinterpret_cast<sockaddr_un*>(&address);
        un->sun_family = AF_UNIX;
        const auto name = "memwire-request-reply-" + std::to_string(::getpid());
        std::memcpy(un->sun_path + 1, name.data(), name.size());
        length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      }
      if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), length) != 0 ||
          ::listen(listener.fd(), 1) != 0 ||
          ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
        throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
      const pid_t server = ::fork();
      if (server < 0) throw std::runtime_error("fork");
      if (server == 0) _exit(serve(listener.fd(), options, tcp));

      nlohmann::json entry = {{"socket", options.socket},
                              {"request", options.request},
                              {"reply", options.reply},
                              {"depth", depth},
                              {"spin", options.spin}};
      rusage client_before{}, client_after{};
      {
        Socket client(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (::connect(client.fd(), reinterpret_cast<sockaddr*>(&address), length) != 0)
          throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
        if (tcp) {
          int on = 1;
          ::setsockopt(client.fd(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        }
        std::vector<char> request(options.request, 'q'), reply(options.reply);
        auto round_trip = [&] {
          if (!send_all(client.fd(), request.data(), request.size()) ||
              !recv_all(client.fd(), reply.data(), reply.size(), options.spin))
            throw std::runtime_error("the server went away");
        };
        for (std::size_t i = 0; i < options.warmup; ++i) round_trip();
        if (depth <= 1) {
          std::vector<double> round_trips;
          round_trips.reserve(options.samples);
          for (std::size_t i = 0; i < options.samples; ++i) {
            const auto start = Clock::now();
            round_trip();
            round_trips.push_back(seconds_since(start) * 1e6);
          }
          const auto s = summarize(round_trips);
          std::printf("%s %zu B -> %zu B  p50 %7.1f us  p99 %7.1f us\n", options.socket.c_str(),
                      options.request, options.reply, s.median, s.p99);
          entry["samples"] = s.count;
          entry["us"] = {
              {"p50", s.median}, {"p90", s.p90}, {"p99", s.p99}, {"min", s.min}, {"max", s.max}};
        } else {
          // The request stream never blocks on the reply stream: N requests are at most
          // N × REQUEST bytes, far below the socket buffers.
          const std::size_t total = std::max(options.pipelined_ops, depth);
          ::getrusage(RUSAGE_SELF, &client_before);
          const auto start = Clock::now();
          std::size_t sent = 0;
          for (; sent < depth; ++sent)
            if (!send_all(client.fd(), request.data(), request.size()))
              throw std::runtime_error("the server went away");
          for (std::size_t received = 0; received < total; ++received) {
            if (!recv_all(client.fd(), reply.data(), reply.size(), options.spin))
              throw std::runtime_error("the server went away");
            if (sent < total) {
              if (!send_all(client.fd(), request.data(), request.size()))
                throw std::runtime_error("the server went away");
              ++sent;
            }
          }
          const double seconds = seconds_since(start);
          ::getrusage(RUSAGE_SELF, &client_after);
          entry["ops"] = total;
          entry["ops_per_s"] = static_cast<double>(total) / seconds;
          entry["client_cpu_us_per_op"] =
              (cpu_seconds(client_after) - cpu_seconds(client_before)) * 1e6 / total;
        }
      }
      int status = 0;
      rusage server_usage{};
      ::wait4(server, &status, 0, &server_usage);
      if (depth > 1) {
        // The server's whole life, warm-up included: what it spent per request it answered.
        const auto answered = std::max(options.pipelined_ops, depth) + options.warmup;
        entry["server_cpu_us_per_op"] = cpu_seconds(server_usage) * 1e6 / answered;
        std::printf(
            "%s %zu B -> %zu B  %zu in flight  %9.0f ops/s  cpu/op client %.2f us server %.2f us\n",
            options.socket.c_str(), options.request, options.reply, depth,
            entry["ops_per_s"].get<double>(), entry["client_cpu_us_per_op"].get<double>(),
            entry["server_cpu_us_per_op"].get<double>());
      }
      results.push_back(entry);
    }
    std::printf("%s\n", nlohmann::json{{"request_reply", results}}.dump().c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "request_reply: %s\n", error.what());
    return 1;
  }
  return 0;
}
