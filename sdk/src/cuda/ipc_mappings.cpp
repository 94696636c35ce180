#include "cuda/ipc_mappings.hpp"

#include <cstring>
#include <mutex>
#include <utility>

#include "memwire/error.hpp"

namespace memwire::detail {

IpcMapping::IpcMapping(const CudaDriver& driver, int ordinal, const CudaDriver::IpcHandle& handle)
    : driver_(driver), ordinal_(ordinal) {
  driver_.use_device(ordinal);
  mapped_ = driver_.open_ipc(handle);
  try {
    const auto allocation = driver_.allocation_of(base());
    size_ = allocation.size;
  } catch (...) {
    driver_.close_ipc(mapped_);
    throw;
  }
}

IpcMapping::~IpcMapping() {
  try {
    driver_.use_device(ordinal_);  // unmapped in the context it was opened in
  } catch (const Error&) {
    return;  // that context is gone, and the mapping with it
  }
  driver_.close_ipc(mapped_);
}

std::shared_ptr<const IpcMapping> IpcMappings::open(const CudaDriver& driver, int ordinal,
                                                    const CudaDriver::IpcHandle& handle) {
  Key key;
  std::memcpy(key.data(), handle.bytes, key.size());
  if (auto found = opened_.find(key); found != opened_.end()) return found->second;
  if (opened_.size() >= kMostOpen)
    throw Error(ErrorCode::Transport, "more than " + std::to_string(kMostOpen) +
                                          " CUDA IPC allocations opened for one connection");
  // Shared by the process's connections: the driver maps a handle once per process.
  static std::mutex mutex;
  static std::map<std::pair<int, Key>, std::weak_ptr<const IpcMapping>> process_wide;
  std::shared_ptr<const IpcMapping> mapping;
  {
    std::lock_guard lock(mutex);
    auto& slot = process_wide[{ordinal, key}];
    mapping = slot.lock();
    if (!mapping) {
      mapping = std::make_shared<const IpcMapping>(driver, ordinal, handle);
      slot = mapping;
    }
    // Forget the slots whose mappings closed.
    std::erase_if(process_wide, [](const auto& entry) { return entry.second.expired(); });
  }
  opened_.emplace(key, mapping);
  return mapping;
}

}  // namespace memwire::detail
