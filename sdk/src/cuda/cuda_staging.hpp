#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/pinned_pool.hpp"
#include "cuda/staged_chunks.hpp"
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
  // fill_host_once() for a sender about to send the stand-in bytes [host, host + length) (all
  // when `host` is null): every chunk is queued at the first call, and each call waits for the
  // chunks that hold its range alone, so later chunks are copied while earlier ones are on the
  // wire (StagedChunks; with MEMWIRE_CUDA_OVERLAP=0, or descriptors on several GPUs, one copy
  // of everything).
  void fill_host(const void* host, std::size_t length) const;
  // A receiver: the stand-in bytes [host, host + length) arrived; they are queued to the device
  // now, and copy_to_device() then waits for them rather than copying them again.
  void landed(const void* host, std::size_t length) const noexcept;
  // Waits for the copies queued so far (a failed transfer: none lands after it ended).
  void settle() const noexcept;

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
  // Chunked copies on a stream of their own (one GPU, overlap on); null otherwise.
  std::unique_ptr<StagedChunks> chunks_;
  mutable std::mutex chunks_mutex_;
  mutable bool queued_to_host_ = false;         // under chunks_mutex_
  mutable std::uint64_t queued_to_device_ = 0;  // under chunks_mutex_: device bytes queued
  mutable bool to_device_failed_ = false;       // under chunks_mutex_: copy it all at the end
};

}  // namespace memwire::detail
