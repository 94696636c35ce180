#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "util/file_descriptor.hpp"

namespace memwire::detail {

// Where a range of this process's memory lives inside one of its SharedBuffers. `buffer` is a
// number this process gave the buffer (never reused while it runs), not a descriptor or a path:
// a peer never opens anything the owner names; the buffer's memfd itself travels over the Unix
// socket (SCM_RIGHTS), once per buffer and access on a connection (PROTOCOL.md, "Mapped").
struct SharedLocation {
  std::uint64_t buffer = 0;
  std::uint64_t file_size = 0;  // the memfd's size: the peer checks the one it holds is that
  std::uint64_t offset = 0;     // of the range, in the file
  std::uint64_t length = 0;     // of the range
};
static_assert(sizeof(SharedLocation) == 32, "on the wire: a mapped answer to one range");

// The part of a SharedBuffer's file that a peer maps: [offset, offset + length), `offset` a
// whole number of pages. A one-shot answer's is the whole file; a pool's, the run of its blocks
// the request's lie in. What the peer maps; it holds the whole buffer's memfd (README).
struct SharedSpan {
  std::uint64_t buffer = 0;
  std::uint64_t file_size = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(SharedSpan) == 32, "on the wire, at the head of a mapped piece answer");

// How many buffer descriptors (a buffer read-only and writable counts twice) an owner sends on
// one connection at most, and so how many a peer takes: past it the owner copies instead.
inline constexpr std::size_t kMaxSharedPerConnection = 64;

// Every live SharedBuffer of this process, by address; `buffer` is its number.
void index_shared_buffer(const std::byte* begin, std::size_t size, int fd, std::uint64_t buffer);
void unindex_shared_buffer(const std::byte* begin) noexcept;
// The buffer that holds all of [data, data + length), if one does.
std::optional<SharedLocation> find_shared(const std::byte* data, std::size_t length);
// Whether buffer `buffer` is still open here (a closed one's memfd has mode 0 from then on).
bool shared_buffer_live(std::uint64_t buffer);
// A descriptor of live buffer `buffer` to hand a peer: writable, or opened read-only (a peer
// that only reads gets no descriptor it could write through). Empty when the buffer is gone
// or the descriptor cannot be made.
FileDescriptor share_shared_buffer(std::uint64_t buffer, bool writable);

}  // namespace memwire::detail
