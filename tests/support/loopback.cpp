#include "support/loopback.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>

namespace memwire::test_support {
namespace {

// A socket bound to 127.0.0.1 on `port`, or on one the kernel picks when it is 0; `listening`:
// accepting too. -1 when `port` is taken.
int bound_loopback_socket(bool listening, std::uint16_t& port, bool may_be_taken = false) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  socklen_t length = sizeof(address);
  if (may_be_taken && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  if ((!may_be_taken && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) ||
      (listening && ::listen(fd, 64) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot bind a loopback port: " + reason);
  }
  port = ntohs(address.sin_port);
  return fd;
}

}  // namespace

EphemeralPorts ephemeral_ports() {
  EphemeralPorts range;
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  file >> range.first >> range.last;
  return range;
}

std::uint16_t free_loopback_port() {
  // Free when checked, then bound by the program a test starts: in between, a port from the
  // kernel's ephemeral range may go to any process's bind(0) or connect() (a consumer once
  // could not listen on the metrics port it was given because another process's transport got
  // it). So the port comes from below that range, where only explicit binds land, at random,
  // and is never handed out twice by this process (a 3-node cluster once got one port twice).
  static std::mutex mutex;
  static std::set<std::uint16_t> handed_out;
  static std::mt19937 random(std::random_device{}());
  std::lock_guard lock(mutex);
  const auto ephemeral = ephemeral_ports();
  constexpr unsigned kLowest = 10000;
  if (ephemeral.first <= kLowest + 1000)
    throw std::runtime_error("the ephemeral port range starts at " +
                             std::to_string(ephemeral.first) + ": no room below it for tests");
  std::uniform_int_distribution<unsigned> pick(kLowest, ephemeral.first - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto port = static_cast<std::uint16_t>(pick(random));
    if (handed_out.contains(port)) continue;
    const int fd = bound_loopback_socket(false, port, /*may_be_taken=*/true);
    if (fd < 0) continue;
    ::close(fd);
    handed_out.insert(port);
    return port;
  }
  throw std::runtime_error("no loopback port left that this process has not handed out");
}

// In the body: port_'s default initialiser runs after fd_'s, and would overwrite the port.
SilentListener::SilentListener() { fd_ = bound_loopback_socket(true, port_); }

SilentListener::~SilentListener() { ::close(fd_); }

}  // namespace memwire::test_support
