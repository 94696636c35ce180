#pragma once

// A socket owner and whole-buffer send and receive on a blocking socket, for the raw baselines (no
// memwire code: they measure what the kernel alone costs).

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace memwire::bench {

// Owns a socket descriptor; a negative one (a failed socket()/accept()) throws with errno.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

inline bool send_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// `spin`: never sleeps in the kernel; polls with non-blocking reads until the bytes came.
inline bool recv_all(int fd, char* data, std::size_t size, bool spin = false) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, spin ? MSG_DONTWAIT : 0);
    if (n < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace memwire::bench
