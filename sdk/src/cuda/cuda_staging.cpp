#include "cuda/cuda_staging.hpp"

#include <algorithm>

#include "cuda/cuda_copies.hpp"
#include "cuda/cuda_driver.hpp"
#include "memwire/error.hpp"

namespace memwire::detail {

const CudaDriver& CudaStaging::require_driver() {
  const auto* driver = CudaDriver::get();
  if (driver == nullptr)
    throw Error(ErrorCode::InvalidArgument,
                "cuda memory needs the CUDA driver, and this process has none (" +
                    CudaDriver::unavailable_reason() + ")");
  return *driver;
}

CudaStaging::CudaStaging(std::vector<Descriptor> device, std::shared_ptr<PinnedPool> pool)
    : driver_(require_driver()), device_(std::move(device)), pool_(std::move(pool)) {
  for (std::size_t i = 0; i < device_.size(); ++i) {
    const auto& descriptor = device_[i];
    const auto where =
        "descriptor " + std::to_string(i) + " (" + descriptor.device().to_string() + ")";
    int ordinal = -1;
    try {
      driver_.use_device(descriptor.device().id());  // the pointer is looked up in its context
      ordinal = driver_.device_of(descriptor.ptr(), descriptor.size());
    } catch (const Error& error) {
      throw Error(error.code(), where + ": " + error.what());
    }
    if (ordinal != descriptor.device().id())
      throw Error(ErrorCode::InvalidArgument,
                  where + ": the memory is on cuda:" + std::to_string(ordinal));
    bytes_ += descriptor.size();
  }
  // Stand-ins start 256 bytes apart at least, as device allocations do: copies stay aligned.
  constexpr std::uint64_t kAlign = 256;
  std::uint64_t laid_out = 0;
  for (const auto& descriptor : device_)
    laid_out += (descriptor.size() + kAlign - 1) / kAlign * kAlign;
  buffer_ = pool_->acquire(laid_out);
  host_.reserve(device_.size());
  auto* next = static_cast<std::byte*>(buffer_.data);
  for (const auto& descriptor : device_) {
    host_.emplace_back(next, descriptor.size());
    next += (descriptor.size() + kAlign - 1) / kAlign * kAlign;
  }
  const bool one_gpu =
      !device_.empty() && std::all_of(device_.begin(), device_.end(), [&](const Descriptor& d) {
        return d.device().id() == device_.front().device().id();
      });
  if (one_gpu && StagedChunks::enabled()) {
    try {
      chunks_ =
          std::make_unique<StagedChunks>(driver_, device_.front().device().id(), device_, host_);
    } catch (...) {
      pool_->release(buffer_);
      throw;
    }
  }
}

CudaStaging::~CudaStaging() {
  chunks_.reset();  // waits for its copies, which reach the stand-ins
  pool_->release(buffer_);
}

void CudaStaging::copy(bool to_device) const {
  std::vector<CopyRun> runs;
  runs.reserve(device_.size());
  std::size_t first = 0;
  while (first < device_.size()) {
    const int ordinal = device_[first].device().id();
    runs.clear();
    std::size_t i = first;
    for (; i < device_.size() && device_[i].device().id() == ordinal; ++i) {
      if (to_device)
        runs.push_back({device_[i].ptr(), host_[i].ptr(), device_[i].size()});
      else
        runs.push_back({host_[i].ptr(), device_[i].ptr(), device_[i].size()});
    }
    copy_runs(driver_, ordinal, runs,
              to_device ? CopyDirection::HostToDevice : CopyDirection::DeviceToHost);
    first = i;
  }
}

void CudaStaging::copy_to_host() const { copy(false); }

void CudaStaging::copy_to_device() const {
  if (chunks_) {
    bool all_queued = false;
    {
      std::lock_guard lock(chunks_mutex_);
      all_queued = !to_device_failed_ && queued_to_device_ == bytes_;
    }
    chunks_->wait_to_device();
    if (all_queued) return;
  }
  copy(true);
}

void CudaStaging::fill_host(const void* host, std::size_t length) const {
  if (!chunks_) return fill_host_once();
  {
    std::lock_guard lock(chunks_mutex_);
    if (!queued_to_host_) {
      chunks_->queue_to_host();
      queued_to_host_ = true;
    }
  }
  chunks_->wait_to_host(static_cast<const std::byte*>(host), length);
}

void CudaStaging::landed(const void* host, std::size_t length) const noexcept {
  if (!chunks_) return;
  std::lock_guard lock(chunks_mutex_);
  if (to_device_failed_) return;
  try {
    queued_to_device_ += chunks_->queue_to_device(static_cast<const std::byte*>(host), length);
  } catch (...) {
    to_device_failed_ = true;  // copy_to_device() copies it all, and says why if it fails
  }
}

void CudaStaging::settle() const noexcept {
  if (chunks_) chunks_->settle();
}

void CudaStaging::fill_host_once() const {
  std::call_once(filled_, [this] { copy(false); });
}

}  // namespace memwire::detail
