#include "cuda/pinned_pool.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "cuda/cuda_driver.hpp"
#include "memwire/error.hpp"

namespace memwire::detail {

PinnedPool::~PinnedPool() {
  for (const auto& buffer : kept_) driver_.free_pinned(buffer.data, buffer.capacity);
}

PinnedPool::Buffer PinnedPool::acquire(std::size_t size) {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t capacity = (size + page - 1) / page * page;
  std::vector<Buffer> to_free;
  {
    std::lock_guard lock(mutex_);
    // The smallest kept buffer that holds `size` without wasting more than as much again.
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->capacity >= capacity && it->capacity <= 2 * capacity &&
          (best == kept_.end() || it->capacity < best->capacity))
        best = it;
    if (best != kept_.end()) {
      const Buffer found = *best;
      kept_.erase(best);
      kept_bytes_ -= found.capacity;
      in_use_ += found.capacity;
      return found;
    }
    if (capacity > limit_ || in_use_ > limit_ - capacity)
      throw Error(ErrorCode::Transport,
                  "cuda staging: " + std::to_string(capacity) +
                      " more bytes of pinned host memory would pass cuda_staging_limit (" +
                      std::to_string(limit_) + ", " + std::to_string(in_use_) + " in use)");
    // Kept buffers make room, largest first.
    std::sort(kept_.begin(), kept_.end(),
              [](const Buffer& a, const Buffer& b) { return a.capacity < b.capacity; });
    while (!kept_.empty() && in_use_ + kept_bytes_ + capacity > limit_) {
      to_free.push_back(kept_.back());
      kept_bytes_ -= kept_.back().capacity;
      kept_.pop_back();
    }
    in_use_ += capacity;  // reserved before pinning, outside the lock
  }
  for (const auto& buffer : to_free) driver_.free_pinned(buffer.data, buffer.capacity);
  try {
    return Buffer{driver_.allocate_pinned(capacity), capacity};
  } catch (...) {
    std::lock_guard lock(mutex_);
    in_use_ -= capacity;
    throw;
  }
}

void PinnedPool::release(Buffer buffer) noexcept {
  if (buffer.data == nullptr) return;
  std::lock_guard lock(mutex_);
  in_use_ -= buffer.capacity;
  kept_.push_back(buffer);
  kept_bytes_ += buffer.capacity;
}

std::uint64_t PinnedPool::in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

std::uint64_t PinnedPool::kept() const {
  std::lock_guard lock(mutex_);
  return kept_bytes_;
}

}  // namespace memwire::detail
