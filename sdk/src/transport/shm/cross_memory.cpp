#include "transport/shm/cross_memory.hpp"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "transport/shm/second_cpu.hpp"

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

std::size_t total_length(std::span<const iovec> parts) {
  std::size_t total = 0;
  for (const auto& part : parts) total += part.iov_len;
  return total;
}

CopyFailure failure_of(const char* what, int error) {
  return {error, std::string(what) + ": " + std::strerror(error)};
}

// Calls `copy(local, local_count, remote, remote_count)` until every byte moved; a call may
// stop early (a fault, a signal), the next one carries on from there.
template <typename Copy>
std::optional<CopyFailure> copy_all(Copy copy, const char* what, std::span<const iovec> theirs,
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
    if (moved <= 0) return failure_of(what, moved < 0 ? errno : EIO);
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

// From this size on, one range is copied in two parts at once: a helper thread takes the one
// second_cpu_part() names, the caller's thread (the owner's event loop, which copies every
// request's bytes itself) the rest, before and after it. One thread's process_vm_readv/writev is
// slower than a one-thread memcpy (2 vCPUs: 64 MiB READ 5.5 GB/s against memcpy 7.5); both CPUs
// together 11-12.
constexpr std::size_t kSplitMinimum = std::size_t{2} << 20;

// What one page-table page maps (x86-64 and arm64 with 4 KiB pages).
constexpr std::uint64_t kTableSpan = std::uint64_t{2} << 20;

// The offset of the table boundary of their addresses nearest to `offset`, within [0, length].
std::size_t nearest_table_edge(std::uint64_t theirs, std::size_t length, std::size_t offset) {
  const std::uint64_t edge = (theirs + offset + kTableSpan / 2) & ~(kTableSpan - 1);
  return static_cast<std::size_t>(std::clamp(edge, theirs, theirs + length) - theirs);
}

// `copy(their_address, ours, length)` over the whole range, split as above when it is large
// and the helper is free.
template <typename Copy>
std::optional<CopyFailure> copy_range(Copy copy, std::uint64_t theirs, std::byte* ours,
                                      std::size_t length) {
  if (length < kSplitMinimum) return copy(theirs, ours, length);
  const auto part = second_cpu_part(theirs, length);
  std::optional<CopyFailure> first, second;
  auto head = [&] {
    if (part.begin > 0) first = copy(theirs, ours, part.begin);
    if (!first && part.end < length)
      first = copy(theirs + part.end, ours + part.end, length - part.end);
  };
  auto tail = [&] {
    try {
      second = copy(theirs + part.begin, ours + part.begin, part.end - part.begin);
    } catch (const std::exception& error) {  // nothing may escape the helper's thread
      second = CopyFailure{EIO, error.what()};
    }
  };
  if (!run_on_two_cpus(WorkRef(head), WorkRef(tail))) return copy(theirs, ours, length);
  return first ? first : second;
}

}  // namespace

SecondPart second_cpu_part(std::uint64_t theirs, std::size_t length) {
  const SecondPart halves{(length / 2) & ~std::size_t{4095}, length};  // whole pages each
  // A hostile address near the top (the kernel refuses it anyway): no arithmetic may wrap below.
  if (length > UINT64_MAX - kTableSpan || theirs > UINT64_MAX - kTableSpan - length) return halves;
  // Two ways to keep the CPUs in tables of their own: the middle between two boundaries (even
  // for any range over two tables or more, whatever its alignment), or from one boundary on.
  const SecondPart middle{nearest_table_edge(theirs, length, length / 4),
                          nearest_table_edge(theirs, length, length - length / 4)};
  const SecondPart rest{nearest_table_edge(theirs, length, length / 2), length};
  auto off_even = [length](SecondPart part) {
    const std::size_t size = part.end - part.begin;
    return size > length / 2 ? size - length / 2 : length / 2 - size;
  };
  const SecondPart best = off_even(middle) <= off_even(rest) ? middle : rest;
  return off_even(best) <= length / 8 ? best : halves;
}

namespace {

// `parts` cut at byte `at` (a block that holds it split in two): what comes before, and after.
std::pair<std::vector<iovec>, std::vector<iovec>> cut(std::span<const iovec> parts,
                                                      std::size_t at) {
  std::vector<iovec> before, after;
  for (const auto& part : parts) {
    if (at >= part.iov_len) {
      before.push_back(part);
      at -= part.iov_len;
    } else if (at > 0) {
      before.push_back({part.iov_base, at});
      after.push_back({static_cast<char*>(part.iov_base) + at, part.iov_len - at});
      at = 0;
    } else {
      after.push_back(part);
    }
  }
  return {std::move(before), std::move(after)};
}

// Many blocks (a pool's scattered READ): from kSplitMinimum bytes on, the first half of the
// bytes on the caller's thread and the second on the helper, at once, as for one range (128
// blocks of 16 KiB, 2 MiB, took one CPU's copy: about 3 GB/s here).
template <typename Copy>
std::optional<CopyFailure> copy_blocks(Copy copy, const char* what, std::span<const iovec> theirs,
                                       std::span<const iovec> ours) {
  const auto total = total_length(ours);
  if (total < kSplitMinimum || total != total_length(theirs))
    return copy_all(copy, what, theirs, ours);
  const auto half = (total / 2) & ~std::size_t{4095};
  // Not structured bindings: the lambdas below capture them, which clang before 16 refuses.
  const auto their_parts = cut(theirs, half);
  const auto our_parts = cut(ours, half);
  const auto& their_head = their_parts.first;
  const auto& their_tail = their_parts.second;
  const auto& our_head = our_parts.first;
  const auto& our_tail = our_parts.second;
  std::optional<CopyFailure> first, second;
  auto head = [&] { first = copy_all(copy, what, their_head, our_head); };
  auto tail = [&] {
    try {
      second = copy_all(copy, what, their_tail, our_tail);
    } catch (const std::exception& error) {  // nothing may escape the helper's thread
      second = CopyFailure{EIO, error.what()};
    }
  };
  if (!run_on_two_cpus(WorkRef(head), WorkRef(tail))) return copy_all(copy, what, theirs, ours);
  return first ? first : second;
}

}  // namespace

std::optional<CopyFailure> copy_to_process(int pid, std::span<const iovec> theirs,
                                           std::span<const iovec> ours) {
  return copy_blocks([pid](auto... parts) { return write_into(pid, parts...); },
                     "process_vm_writev", theirs, ours);
}

std::optional<CopyFailure> copy_from_process(int pid, std::span<const iovec> theirs,
                                             std::span<const iovec> ours) {
  return copy_blocks([pid](auto... parts) { return read_from(pid, parts...); }, "process_vm_readv",
                     theirs, ours);
}

std::optional<CopyFailure> copy_to_process(int pid, std::uint64_t their_address,
                                           const std::byte* ours, std::size_t length) {
  auto copy = [pid](std::uint64_t theirs, std::byte* from, std::size_t count) {
    const iovec local{from, count};
    const iovec remote{reinterpret_cast<void*>(theirs), count};
    // Each part whole on its thread: copy_range split the range already.
    return copy_all([pid](auto... parts) { return write_into(pid, parts...); }, "process_vm_writev",
                    std::span(&remote, 1), std::span(&local, 1));
  };
  return copy_range(copy, their_address, const_cast<std::byte*>(ours), length);
}

std::optional<CopyFailure> copy_from_process(int pid, std::uint64_t their_address, std::byte* ours,
                                             std::size_t length) {
  auto copy = [pid](std::uint64_t theirs, std::byte* into, std::size_t count) {
    const iovec local{into, count};
    const iovec remote{reinterpret_cast<void*>(theirs), count};
    return copy_all([pid](auto... parts) { return read_from(pid, parts...); }, "process_vm_readv",
                    std::span(&remote, 1), std::span(&local, 1));
  };
  return copy_range(copy, their_address, ours, length);
}

}  // namespace memwire::detail
