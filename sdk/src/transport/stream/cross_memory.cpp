#include "transport/stream/cross_memory.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace memwire::detail {
namespace {

template <typename Copy>
std::optional<std::string> copy_all(Copy copy, const char* what, std::size_t length) {
  std::size_t done = 0;
  while (done < length) {
    ssize_t moved = copy(done);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0)
      return std::string(what) + ": " + (moved < 0 ? std::strerror(errno) : "no progress");
    done += static_cast<std::size_t>(moved);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> copy_to_process(int pid, std::uint64_t their_address,
                                           const std::byte* ours, std::size_t length) {
  return copy_all(
      [&](std::size_t done) {
        iovec local{const_cast<std::byte*>(ours) + done, length - done};
        iovec remote{reinterpret_cast<void*>(their_address + done), length - done};
        return ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
      },
      "process_vm_writev", length);
}

std::optional<std::string> copy_from_process(int pid, std::uint64_t their_address, std::byte* ours,
                                             std::size_t length) {
  return copy_all(
      [&](std::size_t done) {
        iovec local{ours + done, length - done};
        iovec remote{reinterpret_cast<void*>(their_address + done), length - done};
        return ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
      },
      "process_vm_readv", length);
}

}  // namespace memwire::detail
