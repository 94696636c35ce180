#include "memwire/sideband/channel.hpp"

namespace memwire::sideband {

PoolMetadata PoolMetadataCache::get(std::string_view name, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(name); it != entries_.end()) return it->second;
  }
  // Fetched without the lock: a slow registry must not hold up readers of other names.
  auto fetched = registry_.fetch_pool(name, timeout);
  std::lock_guard lock(mutex_);
  entries_.insert_or_assign(std::string(name), fetched);
  return fetched;
}

void PoolMetadataCache::forget(std::string_view name) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(name); it != entries_.end()) entries_.erase(it);
}

void PoolMetadataCache::forget(std::string_view name, const PoolMetadata& stale) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(name); it != entries_.end() && it->second == stale)
    entries_.erase(it);
}

void PoolMetadataCache::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
}

std::size_t PoolMetadataCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace memwire::sideband
