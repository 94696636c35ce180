#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "cuda/cuda_copies.hpp"
#include "cuda/cuda_driver.hpp"
#include "memwire/descriptor.hpp"

namespace memwire::detail {

// The copies between one staging's device memory (one GPU) and its pinned stand-ins, in chunks
// on a stream of their own with an event recorded after each chunk, so that they overlap the
// wire: a sender queues every device-to-host chunk at once and waits, before it sends a range,
// for the chunk that ends it alone (the stream is ordered); a receiver queues each range to
// the device as it lands and, at the end, waits for those events rather than copying it all.
// MEMWIRE_CUDA_OVERLAP=0 turns this off (one copy of everything, as before).
class StagedChunks {
 public:
  static bool enabled();
  // Device-to-host chunks: small enough that the first send waits little, large enough that
  // an event per chunk costs nothing next to the wire.
  static constexpr std::size_t kChunk = std::size_t{2} << 20;

  StagedChunks(const CudaDriver& driver, int ordinal, std::vector<Descriptor> device,
               std::vector<Descriptor> host);
  ~StagedChunks();  // waits for what is queued: the memory it copies may go next
  StagedChunks(const StagedChunks&) = delete;
  StagedChunks& operator=(const StagedChunks&) = delete;

  // Queues device -> stand-ins for every byte, chunk by chunk. Throws Error{Transport}.
  void queue_to_host();
  // Waits until the stand-in bytes [host, host + length) hold the device's (all when `host`
  // is null); queue_to_host() ran before.
  void wait_to_host(const std::byte* host, std::size_t length) const;
  // Queues stand-ins -> device for the stand-in bytes in [host, host + length); returns how
  // many device bytes that covers. Throws Error{Transport}.
  std::size_t queue_to_device(const std::byte* host, std::size_t length);
  // Waits for every chunk queue_to_device() queued, chunk by chunk.
  void wait_to_device();
  // Waits for everything queued (a failed transfer: no copy may land after it ended).
  void settle() const noexcept;

 private:
  struct Chunk {
    const std::byte* end;  // the stand-in byte past the chunk
    CudaDriver::Event event;
  };
  // The copies of the stand-in bytes [from, to), one per descriptor they touch.
  std::vector<CopyRun> runs_of(const std::byte* from, const std::byte* to, bool to_device) const;
  // Queues `runs`, then records a new event after them.
  CudaDriver::Event queue(const std::vector<CopyRun>& runs);

  const CudaDriver& driver_;
  const int ordinal_;
  const std::vector<Descriptor> device_;
  const std::vector<Descriptor> host_;  // ascending, back to back (CudaStaging's layout)
  CudaDriver::Stream stream_ = nullptr;
  mutable std::mutex mutex_;
  std::vector<Chunk> to_host_;                // sorted by end
  std::vector<CudaDriver::Event> to_device_;  // in the order queued
};

}  // namespace memwire::detail
