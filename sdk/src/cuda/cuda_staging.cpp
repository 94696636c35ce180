#include "cuda/cuda_staging.hpp"

#include <algorithm>

#include "cuda/cuda_driver.hpp"
#include "memwire/error.hpp"

namespace memwire::detail {

CudaStaging::CudaStaging(std::vector<Descriptor> device, std::shared_ptr<StagingBudget> budget)
    : device_(std::move(device)) {
  driver_ = CudaDriver::get();
  if (driver_ == nullptr)
    throw Error(ErrorCode::InvalidArgument,
                "cuda memory needs the CUDA driver, and this process has none (" +
                    CudaDriver::unavailable_reason() + ")");
  for (std::size_t i = 0; i < device_.size(); ++i) {
    const auto& descriptor = device_[i];
    const auto where =
        "descriptor " + std::to_string(i) + " (" + descriptor.device().to_string() + ")";
    int ordinal = -1;
    try {
      driver_->use_device(descriptor.device().id());  // the pointer is looked up in its context
      ordinal = driver_->device_of(descriptor.ptr(), descriptor.size());
    } catch (const Error& error) {
      throw Error(error.code(), where + ": " + error.what());
    }
    if (ordinal != descriptor.device().id())
      throw Error(ErrorCode::InvalidArgument,
                  where + ": the memory is on cuda:" + std::to_string(ordinal));
    bytes_ += descriptor.size();
  }
  // Taken from the budget before anything is allocated; given back by the destructor.
  auto used = budget->used.load();
  do {
    if (bytes_ > budget->limit - std::min(used, budget->limit))
      throw Error(ErrorCode::Transport,
                  "cuda staging: " + std::to_string(bytes_) + " more bytes of pinned host memory " +
                      "would pass cuda_staging_limit (" + std::to_string(budget->limit) + ", " +
                      std::to_string(used) + " in use)");
  } while (!budget->used.compare_exchange_weak(used, used + bytes_));
  budget_ = std::move(budget);
  try {
    host_.reserve(device_.size());
    for (const auto& descriptor : device_) {
      driver_->use_device(descriptor.device().id());
      host_.emplace_back(driver_->allocate_pinned(descriptor.size()), descriptor.size());
    }
  } catch (...) {
    for (const auto& stand_in : host_) driver_->free_pinned(stand_in.ptr(), stand_in.size());
    budget_->used -= bytes_;
    throw;
  }
}

CudaStaging::~CudaStaging() {
  for (const auto& stand_in : host_) driver_->free_pinned(stand_in.ptr(), stand_in.size());
  budget_->used -= bytes_;
}

void CudaStaging::copy_to_host() const {
  for (std::size_t i = 0; i < device_.size(); ++i) {
    driver_->use_device(device_[i].device().id());
    driver_->copy_to_host(host_[i].ptr(), device_[i].ptr(), device_[i].size());
  }
}

void CudaStaging::copy_to_device() const {
  for (std::size_t i = 0; i < device_.size(); ++i) {
    driver_->use_device(device_[i].device().id());
    driver_->copy_to_device(device_[i].ptr(), host_[i].ptr(), device_[i].size());
  }
}

}  // namespace memwire::detail
