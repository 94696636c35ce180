#pragma once

#include <cstddef>

namespace memwire::detail {

// Copies a mapped peer buffer's chunk (megabytes, read once): from kBulkCopyThreshold on, with
// non-temporal stores, which skip reading each destination line into the cache before writing
// it and leave the cache to the data the caller works on; below it, memcpy.
inline constexpr std::size_t kBulkCopyThreshold = std::size_t{1} << 20;
void copy_bulk(void* destination, const void* source, std::size_t length) noexcept;

// copy_bulk on two CPUs: from kSplitCopyThreshold on, a helper thread copies the second half
// while the caller copies the first (one copy alone is about half of what memory moves here:
// 11-12 GB/s against 21-24 GB/s for two). At most kMostCopyHelpers helpers at once; past that,
// or when a thread cannot start, the caller copies it all. 4 MiB is a transfer's default chunk
// (ConnectorOptions' chunk_size), so each chunk of a large SharedBuffer transfer splits; a
// thread's start (~30 us) is under a tenth of such a copy.
inline constexpr std::size_t kSplitCopyThreshold = std::size_t{4} << 20;
inline constexpr int kMostCopyHelpers = 1;
void copy_bulk_split(void* destination, const void* source, std::size_t length) noexcept;

}  // namespace memwire::detail
