#include "transport/verbs/local_mr_cache.hpp"

#include <algorithm>

namespace memwire::detail::verbs {

std::shared_ptr<const ibv_mr> LocalMrCache::acquire(void* address, std::size_t length, int access) {
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const auto end = begin + length;
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [](const Entry& entry) { return entry.region.expired(); });
  for (const auto& entry : entries_)
    if (entry.begin <= begin && end <= entry.end && (entry.access & access) == access)
      if (auto region = entry.region.lock()) return region;
  // The region keeps the device (and so its PD) alive until it is deregistered.
  auto mr = device_->register_memory(address, length, access);
  std::shared_ptr<const ibv_mr> region(mr.release(), [device = device_](const ibv_mr* raw) {
    MrDeleter{}(const_cast<ibv_mr*>(raw));
  });
  entries_.push_back({begin, end, access, region});
  return region;
}

std::size_t LocalMrCache::size() {
  std::lock_guard lock(mutex_);
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(),
                    [](const Entry& entry) { return !entry.region.expired(); }));
}

}  // namespace memwire::detail::verbs
