#include "cuda/cuda_staging.hpp"

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
}

CudaStaging::~CudaStaging() { pool_->release(buffer_); }

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

void CudaStaging::copy_to_device() const { copy(true); }

void CudaStaging::fill_host_once() const {
  std::call_once(filled_, [this] { copy(false); });
}

}  // namespace memwire::detail
