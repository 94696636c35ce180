#pragma once

#include <cstddef>
#include <span>

#include "memwire/descriptor.hpp"
#include "memwire/export.hpp"

namespace memwire {

// Host memory that peers on the same host can map: an anonymous shared file (memfd) mapped
// into this process. Any memory can be registered; memory from a SharedBuffer moves faster
// between processes of one host: the peer maps it once and copies with one memcpy, where
// other memory costs a kernel copy (process_vm_readv) per transfer.
//
// A peer it is moved to over shm is handed the memfd (sealed at its size) and can map all of
// the buffer, not only the registered range, for as long as it keeps it (README, "Same host").
// Zero-filled; size() is what was asked for. Move-only. A held thing: close() (or dropping it)
// unmaps it here and frees its pages, under peers' mappings too. Do not close it while an
// operation uses it, as with any registered memory.
class [[nodiscard("dropping it unmaps the memory at once")]] MEMWIRE_API SharedBuffer {
 public:
  [[nodiscard("dropping it unmaps the memory at once")]] explicit SharedBuffer(std::size_t size);
  ~SharedBuffer();
  SharedBuffer(SharedBuffer && other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  Descriptor descriptor() const noexcept { return Descriptor(data_, size_); }

  // Unmaps it now: data() is null and size() 0 from then on. Idempotent. Takes no reason, unlike
  // the other ending calls: nothing waits on memory, and no peer is told.
  void close() noexcept;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;  // size_ rounded up to whole pages
  int fd_ = -1;
};

}  // namespace memwire
