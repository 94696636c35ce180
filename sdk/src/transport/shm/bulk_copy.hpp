#pragma once

#include <cstddef>

namespace memwire::detail {

// Copies a mapped peer buffer's chunk (megabytes, read once): from kBulkCopyThreshold on, with
// non-temporal stores, which skip reading each destination line into the cache before writing
// it and leave the cache to the data the caller works on; below it, memcpy.
inline constexpr std::size_t kBulkCopyThreshold = std::size_t{1} << 20;
void copy_bulk(void* destination, const void* source, std::size_t length) noexcept;

// copy_bulk on two CPUs (run_on_two_cpus): from kSplitCopyThreshold on, the process's copy
// helper copies the second half while the caller copies the first; when the helper is busy
// with another copy, the caller copies it all. 4 MiB is a transfer's default chunk
// (ConnectorOptions' chunk_size), so each chunk of a large SharedBuffer transfer splits.
inline constexpr std::size_t kSplitCopyThreshold = std::size_t{4} << 20;
void copy_bulk_split(void* destination, const void* source, std::size_t length) noexcept;

}  // namespace memwire::detail
