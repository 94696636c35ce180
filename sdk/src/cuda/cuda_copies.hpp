#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace memwire::detail {

class CudaDriver;

// One copy between two unified addresses: device memory, pinned host memory, a peer's
// allocation opened through IPC, or plain host memory.
struct CopyRun {
  void* to;
  const void* from;
  std::size_t length;
};

// Where a request's runs go, when the caller knows: many small runs then go through the copy
// kernel (kernel_copies.hpp) in one launch, device to device directly, and between device and
// host through a device scratch buffer and one copy per stretch of consecutive host bytes.
enum class CopyDirection { Unknown, DeviceToDevice, DeviceToHost, HostToDevice };

// Queues every run on the calling thread's own stream for device `ordinal` (one per thread and
// device, made at its first use), then waits until all of them landed. Many small runs cost
// one wait, not one each. Throws Error{Transport} with the driver's reason.
void copy_runs(const CudaDriver& driver, int ordinal, std::span<const CopyRun> runs,
               CopyDirection direction = CopyDirection::Unknown);

// How copy_runs moves many small runs on device `ordinal`: "kernel", or why it cannot (bench).
std::string copy_path(const CudaDriver& driver, int ordinal);

}  // namespace memwire::detail
