#pragma once

#include <cstddef>
#include <span>

namespace memwire::detail {

class CudaDriver;

// One copy between two unified addresses: device memory, pinned host memory, a peer's
// allocation opened through IPC, or plain host memory.
struct CopyRun {
  void* to;
  const void* from;
  std::size_t length;
};

// Queues every run on the calling thread's own stream for device `ordinal` (one per thread and
// device, made at its first use), then waits until all of them landed. Many small runs cost
// one wait, not one each. Throws Error{Transport} with the driver's reason.
void copy_runs(const CudaDriver& driver, int ordinal, std::span<const CopyRun> runs);

}  // namespace memwire::detail
