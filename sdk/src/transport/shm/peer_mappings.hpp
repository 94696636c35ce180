#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "transport/shm/shared_memory_index.hpp"

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

// The SharedBuffers of one same-host peer process that this connection has mapped (whole, or
// the span of one that a pool's answer names): a span is mapped on first use and kept, so later
// transfers cost one memcpy and nothing else. Opening /proc/<pid>/fd/<fd> takes the same kernel
// permission as process_vm_readv; the inode check makes sure the descriptor was not reused for
// another file meanwhile. Buffers the peer has let go of are unmapped on a later miss, and at most
// kMaxMappings stay. One connection's reader thread uses it: no lock.
class PeerMappings {
 public:
  static constexpr std::size_t kMaxMappings = 32;

  explicit PeerMappings(int peer_process) : peer_process_(peer_process) {}

  // The span of the peer's buffer, mapped readable (and writable when asked); throws
  // Error{Transport} with the reason when it cannot be mapped.
  std::shared_ptr<const PeerMapping> map(const SharedSpan& span, bool writable);
  // The whole buffer that holds `location` (a one-shot answer names one).
  std::shared_ptr<const PeerMapping> map(const SharedLocation& location, bool writable) {
    return map(SharedSpan{location.fd, location.inode, 0, location.file_size}, writable);
  }

 private:
  struct Entry {
    std::shared_ptr<const PeerMapping> mapping;
    std::uint64_t fd;
    std::uint64_t last_use;
  };
  // inode, offset, length, writable
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, bool>;

  bool still_held_by_peer(std::uint64_t fd, std::uint64_t inode) const;
  void forget_released();

  const int peer_process_;
  std::map<Key, Entry> entries_;
  std::uint64_t uses_ = 0;
};

}  // namespace memwire::detail
