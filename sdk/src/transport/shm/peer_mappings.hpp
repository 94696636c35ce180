#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "transport/shm/shared_memory_index.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {

// A span of one peer's SharedBuffer, mapped into this process.
class PeerMapping {
 public:
  PeerMapping(std::byte* base, std::size_t size) : base_(base), size_(size) {}
  ~PeerMapping();
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
  std::byte* base() const noexcept { return base_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::byte* base_;
  std::size_t size_;
};

// The SharedBuffers of one same-host peer process that this connection was given, and the spans
// of them it has mapped. The peer hands each buffer's memfd over the socket (SCM_RIGHTS) with
// the first answer that names it; it is checked (a sealed memfd of the size the answer says, opened
// for the access asked) and kept until the owner closes the buffer (seen as the next one arrives)
// or the connection closes. Nothing the peer names is ever
// opened: a buffer number only finds a descriptor the peer gave us. A span is mapped on first
// use and kept, so later transfers cost one memcpy; at most kMaxMappings stay mapped. One
// connection's reader uses it: no lock.
class PeerMappings {
 public:
  static constexpr std::size_t kMaxMappings = 32;

  // Takes `descriptor`, received with an answer naming `buffer` (of `file_size` bytes), for
  // access `writable`; throws Error{Protocol} with the reason (closing it) when it is not a
  // sealed memfd of that size and access, or when the peer sends more than it may.
  void adopt(std::uint64_t buffer, std::uint64_t file_size, bool writable,
             FileDescriptor descriptor);
  // The span of a buffer the peer gave us, mapped readable (and writable when asked); throws
  // Error{Protocol} when no such buffer was given or the span is outside it, Error{Transport}
  // when the kernel refuses the mapping.
  std::shared_ptr<const PeerMapping> map(const SharedSpan& span, bool writable);
  // The whole buffer that holds `location` (a one-shot answer names one).
  std::shared_ptr<const PeerMapping> map(const SharedLocation& location, bool writable) {
    return map(SharedSpan{location.buffer, location.file_size, 0, location.file_size}, writable);
  }
  std::size_t buffers() const noexcept { return buffers_.size(); }

 private:
  // Lets go of the buffers the owner closed since, and of their mappings.
  void forget_released();

  struct Buffer {
    FileDescriptor descriptor;
    std::uint64_t size;
  };
  struct Entry {
    std::shared_ptr<const PeerMapping> mapping;
    std::uint64_t last_use;
  };
  // buffer, offset, length, writable
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, bool>;

  std::map<std::pair<std::uint64_t, bool>, Buffer> buffers_;  // (buffer, writable)
  std::map<Key, Entry> entries_;
  std::uint64_t uses_ = 0;
};

// Why `descriptor` may not be mapped as a peer's SharedBuffer of `size` bytes for `writable`
// access (not a sealed memfd of that size, or not opened for that access), or nullopt.
std::optional<std::string> shared_descriptor_problem(int descriptor, std::uint64_t size,
                                                     bool writable);

}  // namespace memwire::detail
