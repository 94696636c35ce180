#include "core/access_gate.hpp"

#include <algorithm>
#include <vector>

namespace memwire {

void AccessGate::Pin::release() noexcept {
  if (gate_ == nullptr) return;
  std::lock_guard lock(gate_->mutex_);
  if (--gate_->pins_ == 0) gate_->released_.notify_all();
  gate_ = nullptr;
}

std::optional<AccessGate::Pin> AccessGate::pin() {
  std::lock_guard lock(mutex_);
  if (!open_) return std::nullopt;
  ++pins_;
  return Pin(this);
}

bool AccessGate::is_open() const {
  std::lock_guard lock(mutex_);
  return open_;
}

void AccessGate::add_breaker(std::uintptr_t holder, std::function<void()> breaker) {
  std::unique_lock lock(mutex_);
  // Closed, with pins still held: a holder that pinned before the close and adds its breaker
  // only now (a pool request admitted, then bound to its connection) is one the closer may be
  // waiting for. Kept; and past the grace, when the others were broken already, broken at once.
  if (!open_ && pins_ == 0) return;
  if (breaking_) {
    lock.unlock();
    breaker();
    return;
  }
  breakers_.try_emplace(holder, std::move(breaker));
}

void AccessGate::remove_breaker(std::uintptr_t holder) {
  std::lock_guard lock(mutex_);
  breakers_.erase(holder);
}

void AccessGate::add_releaser(std::uintptr_t holder, std::function<void()> releaser) {
  std::lock_guard lock(mutex_);
  if (open_) releasers_.insert_or_assign(holder, std::move(releaser));
}

void AccessGate::remove_releaser(std::uintptr_t holder) {
  std::lock_guard lock(mutex_);
  releasers_.erase(holder);
}

void AccessGate::refuse() {
  std::lock_guard lock(mutex_);
  open_ = false;
}

namespace {
thread_local bool break_at_once = false;
}  // namespace

void AccessGate::break_at_once_on_this_thread(bool at_once) noexcept { break_at_once = at_once; }

void AccessGate::close(std::chrono::milliseconds grace) {
  if (break_at_once) grace = std::min(grace, kServingThreadGrace);
  std::unique_lock lock(mutex_);
  open_ = false;
  if (!releasers_.empty()) {
    // Outside the lock: a releaser takes its holder's lock, and a holder may call in here.
    auto releasers = std::move(releasers_);
    releasers_.clear();
    lock.unlock();
    for (auto& [holder, releaser] : releasers) releaser();
    lock.lock();
  }
  // No pin held (the usual case, and every close after the first): no deadline to compute.
  if (pins_ != 0 && !released_.wait_for(lock, grace, [&] { return pins_ == 0; })) {
    // A copy: a second closer (an event loop whose own connections hold the rest) runs them
    // again, on its thread, where they can let go at once.
    auto breakers = breakers_;
    breaking_ = true;  // a breaker added from now on runs at once (add_breaker)
    lock.unlock();
    for (auto& [holder, breaker] : breakers) breaker();
    lock.lock();
    released_.wait(lock, [&] { return pins_ == 0; });
    breaking_ = false;
  }
  breakers_.clear();
}

}  // namespace memwire
