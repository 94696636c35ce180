#include "support/tcp_received.hpp"

// linux/tcp.h, not netinet/tcp.h: glibc's tcp_info lacks tcpi_bytes_received.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>

namespace memwire::test_support {

std::uint64_t tcp_bytes_read() {
  std::uint64_t total = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    tcp_info info{};
    socklen_t length = sizeof info;
    // Not a TCP socket (or closed meanwhile): it fails and adds nothing.
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) continue;
    if (length < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
      continue;
    // Received by the kernel but not yet read by the process: not counted.
    int unread = 0;
    if (::ioctl(fd, FIONREAD, &unread) != 0) unread = 0;
    total += info.tcpi_bytes_received -
             std::min<std::uint64_t>(info.tcpi_bytes_received, static_cast<unsigned>(unread));
  }
  return total;
}

}  // namespace memwire::test_support
