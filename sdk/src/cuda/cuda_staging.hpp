#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "memwire/descriptor.hpp"
#include "memwire/export.hpp"  // MEMWIRE_API: exported for tests

namespace memwire::detail {

class CudaDriver;

// How many bytes of pinned host memory a connector's CUDA operations may hold at once.
struct StagingBudget {
  explicit StagingBudget(std::uint64_t limit) : limit(limit) {}
  const std::uint64_t limit;
  std::atomic<std::uint64_t> used{0};
};

// One operation's CUDA descriptors and a pinned host stand-in for each: the transports (tcp,
// shm, verbs) move the stand-ins like any host memory, and the operation copies between them
// and the device where the bytes must be (a readable fills them when it is created, a write
// before it starts; a writable copies to the device when the writer's completion notice
// arrives, a read when its last byte arrived). Pinned memory: the copy engines reach it
// directly, and verbs can register it.
class MEMWIRE_API CudaStaging {
 public:
  // Checks every descriptor (a CUDA driver, device memory of the device it names, inside one
  // allocation) and takes the stand-ins out of `budget`. Throws Error{InvalidArgument} when no
  // driver is loaded or the memory is not what the descriptor says, Error{Transport} when the
  // budget is spent (its limit is ConnectorOptions::cuda_staging_limit).
  CudaStaging(std::vector<Descriptor> device, std::shared_ptr<StagingBudget> budget);
  ~CudaStaging();
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  const std::vector<Descriptor>& device() const noexcept { return device_; }
  const std::vector<Descriptor>& host() const noexcept { return host_; }
  std::uint64_t bytes() const noexcept { return bytes_; }

  void copy_to_host() const;    // device -> stand-ins
  void copy_to_device() const;  // stand-ins -> device

 private:
  const CudaDriver* driver_ = nullptr;
  std::vector<Descriptor> device_;
  std::vector<Descriptor> host_;
  std::uint64_t bytes_ = 0;
  std::shared_ptr<StagingBudget> budget_;
};

}  // namespace memwire::detail
