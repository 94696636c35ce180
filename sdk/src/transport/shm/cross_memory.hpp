#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace memwire::detail {

// Why the kernel refused a copy: its errno (EIO when a call moved nothing, or the helper thread
// failed otherwise), for callers that tell refusals apart, and the text to report.
struct CopyFailure {
  int error;
  std::string what;
};

// Copies between this process and another one on the same host (process_vm_readv/writev):
// one copy, no socket. The kernel checks that we may access the other process (same user,
// ptrace rules); a refusal comes back as a CopyFailure.
std::optional<CopyFailure> copy_to_process(int pid, std::uint64_t their_address,
                                           const std::byte* ours, std::size_t length);
std::optional<CopyFailure> copy_from_process(int pid, std::uint64_t their_address, std::byte* ours,
                                             std::size_t length);

// The same for many blocks at once, one system call for up to IOV_MAX of them: `ours` and
// `theirs` list the blocks in the same order and add up to the same length.
std::optional<CopyFailure> copy_to_process(int pid, std::span<const iovec> theirs,
                                           std::span<const iovec> ours);
std::optional<CopyFailure> copy_from_process(int pid, std::span<const iovec> theirs,
                                             std::span<const iovec> ours);

// Which part of a large copy the second CPU takes: offsets [begin, end) into it; the caller
// copies the rest. Both CPUs pin the other process's pages, under the lock of the page table
// that maps them (one table per 2 MiB of its addresses): parts that meet inside one table
// wait on each other. So the edges of the part sit on 2 MiB boundaries of `their_address` when
// that still splits the work within 1/8 of evenly (every 4 MiB chunk, at any alignment), else
// it is the plain second half.
struct SecondPart {
  std::size_t begin = 0;
  std::size_t end = 0;
};
SecondPart second_cpu_part(std::uint64_t their_address, std::size_t length);

}  // namespace memwire::detail
