#include "support/loopback.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>

namespace memwire::test_support {
namespace {

// A socket bound to 127.0.0.1 on a port the kernel picks; `listening`: accepting too.
int bound_loopback_socket(bool listening, std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
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

std::uint16_t free_loopback_port() {
  // The port is free again once its socket closes, so the kernel may pick it for the next
  // caller too: a 3-node cluster once got one port as a node's route port and another node's
  // monitor port (the route then spoke to an HTTP server). Never hand out a port twice.
  static std::mutex mutex;
  static std::set<std::uint16_t> handed_out;
  std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::uint16_t port = 0;
    ::close(bound_loopback_socket(false, port));
    if (handed_out.insert(port).second) return port;
  }
  throw std::runtime_error("no loopback port left that this process has not handed out");
}

// In the body: port_'s default initialiser runs after fd_'s, and would overwrite the port.
SilentListener::SilentListener() { fd_ = bound_loopback_socket(true, port_); }

SilentListener::~SilentListener() { ::close(fd_); }

}  // namespace memwire::test_support
