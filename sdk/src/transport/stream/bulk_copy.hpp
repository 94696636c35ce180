#pragma once

#include <cstddef>

namespace memwire::detail {

// Copies a mapped peer buffer's chunk (megabytes, read once): from kBulkCopyThreshold on, with
// non-temporal stores, which skip reading each destination line into the cache before writing
// it and leave the cache to the data the caller works on; below it, memcpy.
inline constexpr std::size_t kBulkCopyThreshold = std::size_t{1} << 20;
void copy_bulk(void* destination, const void* source, std::size_t length) noexcept;

}  // namespace memwire::detail
