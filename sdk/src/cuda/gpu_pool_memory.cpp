#include "cuda/gpu_pool_memory.hpp"

#include "cuda/cuda_copies.hpp"
#include "cuda/cuda_staging.hpp"
#include "cuda/pinned_pool.hpp"
#include "memwire/error.hpp"

namespace memwire::detail {

GpuPoolMemory::GpuPoolMemory(const std::vector<BlockRegion>& regions, std::uint64_t staging_limit)
    : driver_(CudaStaging::require_driver()) {
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const auto& region = regions[i];
    const auto where = "region " + std::to_string(i) + " (" + region.device.to_string() + ")";
    if (region.device.kind() != DeviceKind::Cuda)
      throw Error(ErrorCode::InvalidArgument,
                  where + ": a pool's regions are all in GPU memory or none is");
    if (ordinal_ >= 0 && region.device.id() != ordinal_)
      throw Error(ErrorCode::InvalidArgument,
                  where + ": a pool's regions are all on one device (the first is on cuda:" +
                      std::to_string(ordinal_) + ")");
    const auto span = (region.count - 1) * region.stride + region.block_size;
    try {
      driver_.use_device(region.device.id());
      const int found = driver_.device_of(region.base, span);
      if (found != region.device.id())
        throw Error(ErrorCode::InvalidArgument, "the memory is on cuda:" + std::to_string(found));
    } catch (const Error& error) {
      throw Error(error.code(), where + ": " + error.what());
    }
    ordinal_ = region.device.id();
    const auto allocation = driver_.allocation_of(region.base);
    if (allocation_holding(region.base, span) != nullptr) continue;
    Allocation held{allocation.base, allocation.size, false, {}};
    held.has_handle = driver_.ipc_handle_of(allocation.base, held.handle);
    ipc_ready_ = ipc_ready_ && held.has_handle;
    allocations_.push_back(held);
  }
  bounces_ = std::make_shared<PinnedPool>(driver_, staging_limit);
}

GpuPoolMemory::~GpuPoolMemory() = default;

const GpuPoolMemory::Allocation* GpuPoolMemory::allocation_holding(
    const void* address, std::uint64_t length) const noexcept {
  const auto start = reinterpret_cast<CudaDriver::DevicePointer>(address);
  for (const auto& allocation : allocations_)
    if (start >= allocation.base && length <= allocation.size &&
        start - allocation.base <= allocation.size - length)
      return &allocation;
  return nullptr;
}

std::shared_ptr<std::byte> GpuPoolMemory::bounce(std::size_t size) const {
  driver_.use_device(ordinal_);  // pinned in this pool's context, from any thread
  auto buffer = bounces_->acquire(size);
  return std::shared_ptr<std::byte>(
      static_cast<std::byte*>(buffer.data),
      [pool = bounces_, buffer](std::byte*) { pool->release(buffer); });
}

void GpuPoolMemory::gather(std::byte* host, std::span<const iovec> blocks) const {
  std::vector<CopyRun> runs;
  runs.reserve(blocks.size());
  for (const auto& block : blocks) {
    runs.push_back({host, block.iov_base, block.iov_len});
    host += block.iov_len;
  }
  copy_runs(driver_, ordinal_, runs, CopyDirection::DeviceToHost);
}

void GpuPoolMemory::scatter(std::span<const iovec> blocks, const std::byte* host) const {
  std::vector<CopyRun> runs;
  runs.reserve(blocks.size());
  for (const auto& block : blocks) {
    runs.push_back({block.iov_base, host, block.iov_len});
    host += block.iov_len;
  }
  copy_runs(driver_, ordinal_, runs, CopyDirection::HostToDevice);
}

}  // namespace memwire::detail
