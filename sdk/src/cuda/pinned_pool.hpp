#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace memwire::detail {

class CudaDriver;

// A connector's pinned host memory for CUDA staging. Pinning is the expensive part (about a
// millisecond per 10 MB), so a buffer an operation gave back is kept for the next one of about
// its size. `limit` bounds the bytes pinned in all, in use and kept: a request that would pass
// it first frees kept buffers, then is refused (ConnectorOptions::cuda_staging_limit).
class PinnedPool {
 public:
  struct Buffer {
    void* data = nullptr;
    std::size_t capacity = 0;
  };

  PinnedPool(const CudaDriver& driver, std::uint64_t limit) : driver_(driver), limit_(limit) {}
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // At least `size` bytes: a kept buffer of at most twice that, or a new one. Throws
  // Error{Transport} past the limit, or when the driver cannot pin the memory.
  Buffer acquire(std::size_t size);
  void release(Buffer buffer) noexcept;

  std::uint64_t in_use() const;
  std::uint64_t kept() const;

 private:
  const CudaDriver& driver_;
  const std::uint64_t limit_;
  mutable std::mutex mutex_;
  std::uint64_t in_use_ = 0;
  std::uint64_t kept_bytes_ = 0;
  std::vector<Buffer> kept_;
};

}  // namespace memwire::detail
