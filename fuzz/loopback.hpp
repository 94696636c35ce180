#pragma once

// Loopback sockets for the fuzz targets that talk to a real endpoint in the same process:
// every wait is bounded, so a peer that stops answering is a timeout finding, not a hang here.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "transport/stream/socket.hpp"

namespace memwire::fuzz {

// How long a peer may take to answer and close before the fuzz target gives up on it.
inline constexpr int kAnswerTimeoutMs = 10000;

// Every wait here goes through memwire::detail::poll_resumed: libFuzzer's -timeout watchdog
// interrupts waits with SIGALRM, and an interrupted wait is not a silent peer.
inline int poll_one(pollfd& ready, int timeout_ms) {
  return detail::poll_resumed(ready, std::chrono::milliseconds(timeout_ms));
}

inline int connect_loopback(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    // Interrupted by a signal, the handshake goes on: wait for it, then ask how it ended.
    if (errno != EINTR) std::abort();
    pollfd ready{fd, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof error;
    if (poll_one(ready, kAnswerTimeoutMs) <= 0 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0)
      std::abort();
  }
  return fd;
}

// accept(), resumed after a signal.
inline int accept_one(int listener) {
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0 || errno != EINTR) return fd;
  }
}

// A listening socket on 127.0.0.1, any free port.
inline int listen_loopback(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    std::abort();
  port = ntohs(address.sin_port);
  return fd;
}

// Sends what the peer takes, while draining what it answers (so neither side blocks on a full
// buffer); stops early when the peer closed.
inline void send_draining(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    pollfd ready{fd, POLLOUT | POLLIN, 0};
    if (poll_one(ready, kAnswerTimeoutMs) <= 0) break;
    if (ready.revents & POLLIN) {
      char sink[4096];
      if (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) == 0) break;
    }
    if (ready.revents & (POLLERR | POLLHUP)) break;
    if (ready.revents & POLLOUT) {
      auto sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) break;
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
  }
}

// The same, then half-closes: the peer sees the end of the input.
inline void send_then_half_close(int fd, std::string_view bytes) {
  send_draining(fd, bytes);
  ::shutdown(fd, SHUT_WR);
}

// Reads (and drops) everything until the peer closes, within kAnswerTimeoutMs in all, or (when
// quiet_ms >= 0) until nothing came for quiet_ms. False when the peer kept the connection open.
inline bool drain_until_closed(int fd, int quiet_ms = -1) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerTimeoutMs);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    if (quiet_ms >= 0 && left > quiet_ms) left = quiet_ms;
    pollfd ready{fd, POLLIN, 0};
    if (poll_one(ready, static_cast<int>(left)) <= 0) return false;
    char sink[65536];
    auto got = ::recv(fd, sink, sizeof sink, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return true;
  }
}

}  // namespace memwire::fuzz
