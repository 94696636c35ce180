#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "cuda/cuda_copies.hpp"
#include "cuda/cuda_driver.hpp"

namespace memwire::detail {

// Device memory of the calling thread for one device, grown on demand and freed with the
// thread; what a request's copies need beside the memory they name (a run table, a scratch
// buffer). The caller waits for the work that used it before it asks again.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const CudaDriver& driver) : driver_(driver) {}
  ~DeviceBuffer() { driver_.free_device(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // At least `size` bytes (the device's context current); the old bytes are not kept.
  std::byte* reserve(std::size_t size);

 private:
  const CudaDriver& driver_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// memwire's copy kernel (src/cuda/kernels/copy_runs.cu, PTX embedded at build time) on device
// `ordinal`: every run of a request copied by one launch, where a copy each costs microseconds.
// available() is false when this build has no PTX (no nvcc), the driver did not load it, or
// MEMWIRE_CUDA_COPY_KERNEL=0 (to compare);
// unavailable_reason() then says why and the caller copies run by run.
class CopyKernel {
 public:
  // Loaded once per process and device, on first use (the device's context current).
  static const CopyKernel& of(const CudaDriver& driver, int ordinal);
  ~CopyKernel();
  CopyKernel(const CopyKernel&) = delete;
  CopyKernel& operator=(const CopyKernel&) = delete;

  bool available() const noexcept { return function_ != nullptr; }
  const std::string& unavailable_reason() const noexcept { return reason_; }
  // Queues one launch on `stream` copying every run, device (or IPC-opened) memory at both ends;
  // `table` holds the runs' table for the launch. Every run is checked first (no address range
  // wraps around; empty runs are skipped): Error{InvalidArgument} and nothing queued otherwise.
  void launch(std::span<const CopyRun> runs, DeviceBuffer& table, CudaDriver::Stream stream) const;

 private:
  CopyKernel(const CudaDriver& driver, int ordinal);
  const CudaDriver& driver_;
  CudaDriver::Module module_ = nullptr;
  CudaDriver::Function function_ = nullptr;
  std::string reason_;
};

}  // namespace memwire::detail
