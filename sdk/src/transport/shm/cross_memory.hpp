#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace memwire::detail {

// Copies between this process and another one on the same host (process_vm_readv/writev):
// one copy, no socket. The kernel checks that we may access the other process (same user,
// ptrace rules); a refusal comes back as the reason text.
std::optional<std::string> copy_to_process(int pid, std::uint64_t their_address,
                                           const std::byte* ours, std::size_t length);
std::optional<std::string> copy_from_process(int pid, std::uint64_t their_address, std::byte* ours,
                                             std::size_t length);

// The same for many blocks at once, one system call for up to IOV_MAX of them: `ours` and
// `theirs` list the blocks in the same order and add up to the same length.
std::optional<std::string> copy_to_process(int pid, std::span<const iovec> theirs,
                                           std::span<const iovec> ours);
std::optional<std::string> copy_from_process(int pid, std::span<const iovec> theirs,
                                             std::span<const iovec> ours);

}  // namespace memwire::detail
