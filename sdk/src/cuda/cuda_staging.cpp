#include "cuda/cuda_staging.hpp"

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
  try {
    buffers_.reserve(device_.size());
    host_.reserve(device_.size());
    for (const auto& descriptor : device_) {
      buffers_.push_back(pool_->acquire(descriptor.size()));
      host_.emplace_back(buffers_.back().data, descriptor.size());
    }
  } catch (...) {
    for (const auto& buffer : buffers_) pool_->release(buffer);
    throw;
  }
}

CudaStaging::~CudaStaging() {
  for (const auto& buffer : buffers_) pool_->release(buffer);
}

void CudaStaging::copy_to_host() const {
  for (std::size_t i = 0; i < device_.size(); ++i) {
    driver_.use_device(device_[i].device().id());
    driver_.copy_to_host(host_[i].ptr(), device_[i].ptr(), device_[i].size());
  }
}

void CudaStaging::copy_to_device() const {
  for (std::size_t i = 0; i < device_.size(); ++i) {
    driver_.use_device(device_[i].device().id());
    driver_.copy_to_device(device_[i].ptr(), host_[i].ptr(), device_[i].size());
  }
}

}  // namespace memwire::detail
