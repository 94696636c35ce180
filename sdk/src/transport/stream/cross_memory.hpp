#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace memwire::detail {

// Copies between this process and another one on the same host (process_vm_readv/writev):
// one copy, no socket. The kernel checks that we may access the other process (same user,
// ptrace rules); a refusal comes back as the reason text.
std::optional<std::string> copy_to_process(int pid, std::uint64_t their_address,
                                           const std::byte* ours, std::size_t length);
std::optional<std::string> copy_from_process(int pid, std::uint64_t their_address, std::byte* ours,
                                             std::size_t length);

}  // namespace memwire::detail
