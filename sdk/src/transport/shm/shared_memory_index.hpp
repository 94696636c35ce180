#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace memwire::detail {

// Where a range of this process's memory lives inside one of its SharedBuffers: enough for a
// peer on this host to open the file (/proc/<pid>/fd/<fd>), check it is the same one (inode)
// and map it.
struct SharedLocation {
  std::uint64_t fd = 0;
  std::uint64_t inode = 0;
  std::uint64_t offset = 0;     // of the range, in the file
  std::uint64_t file_size = 0;  // bytes the peer maps
};

// The part of a SharedBuffer's file that a peer maps: [offset, offset + length), `offset` a
// whole number of pages. A one-shot answer's is the whole file; a pool's, the run of its blocks
// the request's lie in, so that the mapping exposes nothing else (PROTOCOL.md).
struct SharedSpan {
  std::uint64_t fd = 0;
  std::uint64_t inode = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(SharedSpan) == 32, "on the wire, at the head of a mapped piece answer");

// Every live SharedBuffer of this process, by address.
void index_shared_buffer(const std::byte* begin, std::size_t size, int fd, std::uint64_t inode);
void unindex_shared_buffer(const std::byte* begin) noexcept;
// The buffer that holds all of [data, data + length), if one does.
std::optional<SharedLocation> find_shared(const std::byte* data, std::size_t length);

}  // namespace memwire::detail
