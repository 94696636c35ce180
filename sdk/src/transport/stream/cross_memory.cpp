#include "transport/stream/cross_memory.hpp"

#include <limits.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace memwire::detail {
namespace {

// The blocks still to move, after `skip` bytes of them.
void advance(std::vector<iovec>& parts, std::size_t& first, std::size_t skip) {
  while (skip > 0 && first < parts.size()) {
    const auto step = std::min(skip, parts[first].iov_len);
    parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + step;
    parts[first].iov_len -= step;
    skip -= step;
    if (parts[first].iov_len == 0) ++first;
  }
  while (first < parts.size() && parts[first].iov_len == 0) ++first;
}

// Calls `copy(local, local_count, remote, remote_count)` until every byte moved; a call may
// stop early (a fault, a signal), the next one carries on from there.
template <typename Copy>
std::optional<std::string> copy_all(Copy copy, const char* what, std::span<const iovec> theirs,
                                    std::span<const iovec> ours) {
  std::vector<iovec> local(ours.begin(), ours.end()), remote(theirs.begin(), theirs.end());
  std::size_t local_first = 0, remote_first = 0;
  advance(local, local_first, 0);
  advance(remote, remote_first, 0);
  while (local_first < local.size() && remote_first < remote.size()) {
    const auto local_count = std::min<std::size_t>(local.size() - local_first, IOV_MAX);
    const auto remote_count = std::min<std::size_t>(remote.size() - remote_first, IOV_MAX);
    ssize_t moved = copy(&local[local_first], local_count, &remote[remote_first], remote_count);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0)
      return std::string(what) + ": " + (moved < 0 ? std::strerror(errno) : "no progress");
    advance(local, local_first, static_cast<std::size_t>(moved));
    advance(remote, remote_first, static_cast<std::size_t>(moved));
  }
  return std::nullopt;
}

ssize_t write_into(int pid, const iovec* local, std::size_t local_count, const iovec* remote,
                   std::size_t remote_count) {
  return ::process_vm_writev(pid, local, local_count, remote, remote_count, 0);
}

ssize_t read_from(int pid, const iovec* local, std::size_t local_count, const iovec* remote,
                  std::size_t remote_count) {
  return ::process_vm_readv(pid, local, local_count, remote, remote_count, 0);
}

}  // namespace

std::optional<std::string> copy_to_process(int pid, std::span<const iovec> theirs,
                                           std::span<const iovec> ours) {
  return copy_all([pid](auto... parts) { return write_into(pid, parts...); }, "process_vm_writev",
                  theirs, ours);
}

std::optional<std::string> copy_from_process(int pid, std::span<const iovec> theirs,
                                             std::span<const iovec> ours) {
  return copy_all([pid](auto... parts) { return read_from(pid, parts...); }, "process_vm_readv",
                  theirs, ours);
}

std::optional<std::string> copy_to_process(int pid, std::uint64_t their_address,
                                           const std::byte* ours, std::size_t length) {
  const iovec local{const_cast<std::byte*>(ours), length};
  const iovec remote{reinterpret_cast<void*>(their_address), length};
  return copy_to_process(pid, std::span(&remote, 1), std::span(&local, 1));
}

std::optional<std::string> copy_from_process(int pid, std::uint64_t their_address, std::byte* ours,
                                             std::size_t length) {
  const iovec local{ours, length};
  const iovec remote{reinterpret_cast<void*>(their_address), length};
  return copy_from_process(pid, std::span(&remote, 1), std::span(&local, 1));
}

}  // namespace memwire::detail
