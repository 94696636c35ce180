#pragma once

#include <cstddef>

namespace memwire {

// The longest tag, and peer name, memwire carries: one number for the API and every transport's
// wire (it fits a verbs notice beside its header and keys).
inline constexpr std::size_t kMaxTagBytes = 160;

}  // namespace memwire
