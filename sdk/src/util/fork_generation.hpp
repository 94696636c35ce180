#pragma once

#include <cstdint>

namespace memwire::detail {

// How many fork()s lie between the first call in this process's ancestry and now: a child
// sees a larger number than its parent did before the fork. An object that records it at
// construction knows, with one integer compare, whether it was inherited through fork() (its
// threads and their records do not exist in the child).
std::uint64_t fork_generation() noexcept;

}  // namespace memwire::detail
