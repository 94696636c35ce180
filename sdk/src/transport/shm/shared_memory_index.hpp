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

// Every live SharedBuffer of this process, by address.
void index_shared_buffer(const std::byte* begin, std::size_t size, int fd, std::uint64_t inode);
void unindex_shared_buffer(const std::byte* begin) noexcept;
// The buffer that holds all of [data, data + length), if one does.
std::optional<SharedLocation> find_shared(const std::byte* data, std::size_t length);

}  // namespace memwire::detail
