#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/pinned_pool.hpp"
#include "memwire/descriptor.hpp"

namespace memwire::detail {

class CudaDriver;

// One operation's CUDA descriptors and a pinned host stand-in for each: the transports (tcp,
// shm, verbs) move the stand-ins like any host memory, and the operation copies between them
// and the device where the bytes must be (a readable fills them when it is created, a write
// before it starts; a writable copies to the device when the writer's completion notice
// arrives, a read when its last byte arrived). Pinned memory: the copy engines reach it
// directly, and verbs can register it.
class CudaStaging {
 public:
  // The process's CUDA driver; throws Error{InvalidArgument} saying why there is none.
  static const CudaDriver& require_driver();

  // Checks every descriptor (device memory of the device it names, inside one allocation) and
  // takes the stand-ins from `pool`. Throws Error{InvalidArgument} when no driver is loaded or
  // the memory is not what the descriptor says, Error{Transport} past the pool's limit.
  CudaStaging(std::vector<Descriptor> device, std::shared_ptr<PinnedPool> pool);
  ~CudaStaging();
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  const std::vector<Descriptor>& device() const noexcept { return device_; }
  const std::vector<Descriptor>& host() const noexcept { return host_; }
  std::uint64_t bytes() const noexcept { return bytes_; }

  void copy_to_host() const;    // device -> stand-ins
  void copy_to_device() const;  // stand-ins -> device
  // A readable whose every reader goes through its owner (no verbs): its stand-ins are filled
  // at the first request that reads them rather than at its creation, so a peer that copies
  // through CUDA IPC never waits for them. Once; a failed copy is tried again by the next.
  void fill_host_once() const;

  // A same-host writer wrote the device memory itself (CUDA IPC, the owner copying): the
  // stand-ins hold nothing newer, and the completion must not copy them over the device.
  void note_written_on_device() const noexcept { written_on_device_ = true; }
  bool written_on_device() const noexcept { return written_on_device_; }

 private:
  const CudaDriver& driver_;
  std::vector<Descriptor> device_;
  std::vector<Descriptor> host_;
  // One pinned buffer for all stand-ins, back to back: a transfer of many small runs pins
  // and copies once, not once per run.
  PinnedPool::Buffer buffer_;
  // Copies each device's runs on one stream, then waits once.
  void copy(bool to_device) const;
  std::uint64_t bytes_ = 0;
  std::shared_ptr<PinnedPool> pool_;
  mutable std::atomic<bool> written_on_device_{false};
  mutable std::once_flag filled_;
};

}  // namespace memwire::detail
