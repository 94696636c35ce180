#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "memwire/pool.hpp"

namespace memwire::detail {

class PinnedPool;

// The shm offer's attribute of a one-shot operation over GPU memory whose owner copies through
// CUDA IPC (PROTOCOL.md, "CUDA IPC"); its value is the frame version of such requests.
inline constexpr const char* kCudaIpcAttribute = "cuda_ipc";
inline constexpr const char* kCudaIpcAttributeValue = "2";

// A pool's regions in GPU memory, all on one device, checked against the driver when the pool
// is registered. The owner serves them with it: bytes that travel over a socket, or to a peer's
// host memory, pass through pinned host bounce buffers. A peer side hands them to a same-host
// owner with it: each region's allocation and its IPC handle, got once.
class GpuPoolMemory {
 public:
  struct Allocation {
    CudaDriver::DevicePointer base = 0;
    std::uint64_t size = 0;
    bool has_handle = false;  // cuIpcGetMemHandle refuses cuMemCreate and pool allocations
    CudaDriver::IpcHandle handle{};
  };

  // Throws Error{InvalidArgument} when there is no driver, a region is not device memory of
  // the device it names (or runs past its allocation), or the regions span several devices.
  GpuPoolMemory(const std::vector<BlockRegion>& regions, std::uint64_t staging_limit);
  ~GpuPoolMemory();
  GpuPoolMemory(const GpuPoolMemory&) = delete;
  GpuPoolMemory& operator=(const GpuPoolMemory&) = delete;

  const CudaDriver& driver() const noexcept { return driver_; }
  int ordinal() const noexcept { return ordinal_; }
  // Every region's allocation can be opened by another process (CUDA IPC).
  bool ipc_ready() const noexcept { return ipc_ready_; }
  // The allocation that holds [address, address + length), or null.
  const Allocation* allocation_holding(const void* address, std::uint64_t length) const noexcept;

  // At least `size` bytes of pinned host memory, given back when the last owner lets go.
  // Throws Error{Transport} past the connector's cuda_staging_limit.
  std::shared_ptr<std::byte> bounce(std::size_t size) const;
  // blocks -> host, back to back; host -> blocks. One wait for all the blocks.
  void gather(std::byte* host, std::span<const iovec> blocks) const;
  void scatter(std::span<const iovec> blocks, const std::byte* host) const;

 private:
  const CudaDriver& driver_;
  int ordinal_ = -1;
  bool ipc_ready_ = true;
  std::vector<Allocation> allocations_;  // distinct, of the regions
  std::shared_ptr<PinnedPool> bounces_;
};

}  // namespace memwire::detail
