#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "transport/stream/frame.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {

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
// A descriptor of live buffer `buffer` to hand a peer: writable, or opened read-only for a read
// of memory that `peers_may_write` or not. The first hand-out seals the buffer for good: for a
// read peers may not write, against every writable mapping and write (F_SEAL_FUTURE_WRITE: a
// peer that reopens its descriptor read-write through /proc still cannot write; the owner's own
// mapping still can); otherwise it stays writable for peers. Empty when the buffer is gone, the
// descriptor cannot be made, or the buffer was sealed the other way (the owner copies instead).
FileDescriptor share_shared_buffer(std::uint64_t buffer, bool writable, bool peers_may_write);

}  // namespace memwire::detail
