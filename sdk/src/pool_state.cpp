#include "pool_state.hpp"

#include <algorithm>

#include "active_transfer.hpp"

namespace memwire::detail {

PoolState::PoolState(PoolOptions options, std::uint64_t generation,
                     std::vector<BlockRegion> regions)
    : options_(std::move(options)), generation_(generation), regions_(std::move(regions)) {}

void PoolState::check_open() const {
  if (closed_) throw Error(ErrorCode::Cancelled, "the pool was closed by its owner");
}

void PoolState::post(Notification notification, std::unique_lock<std::mutex>& lock) {
  if (callback_) {
    auto callback = callback_;
    lock.unlock();
    callback(notification);
    return;
  }
  queue_.push_back(std::move(notification));
  lock.unlock();
  changed_.notify_all();
}

void PoolState::deliver(std::string peer, std::string tag) {
  std::unique_lock lock(mutex_);
  check_open();
  if (!callback_ && queue_.size() - failures_queued_ >= options_.max_queued_notifications)
    throw Error(ErrorCode::Transport,
                "the pool's owner has " + std::to_string(options_.max_queued_notifications) +
                    " notifications queued and takes no more (max_queued_notifications)");
  // The peer is back: an earlier loss of it no longer ends waits.
  std::erase_if(queue_, [&](const Notification& queued) {
    const bool stale = !queued.error.empty() && queued.tag.empty() && queued.peer == peer;
    failures_queued_ -= stale ? 1 : 0;
    return stale;
  });
  post({std::move(peer), std::move(tag), ""}, lock);
}

void PoolState::fail(std::string peer, std::string tag, const Error& error) {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  if (!callback_ && failures_queued_ == kMostFailuresQueued) {
    // The oldest failure goes: a peer failing over and over must not grow the queue.
    auto oldest = std::find_if(queue_.begin(), queue_.end(),
                               [](const Notification& queued) { return !queued.error.empty(); });
    queue_.erase(oldest);
    --failures_queued_;
  }
  if (!callback_) ++failures_queued_;
  try {
    post({std::move(peer), std::move(tag), error.what()}, lock);
  } catch (...) {
    // A callback that refuses a failure has nobody to tell: failures come from connections
    // closing, with no sender waiting for an answer.
  }
}

template <class Found>
Notification PoolState::wait(std::chrono::milliseconds timeout, Found found) {
  std::unique_lock lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    check_open();
    if (auto taken = found()) return std::move(*taken);
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      check_open();
      if (auto taken = found()) return std::move(*taken);
      throw Error(ErrorCode::Timeout,
                  "no notification within " + std::to_string(timeout.count()) + " ms");
    }
  }
}

namespace {
[[noreturn]] void raise(const Notification& failure) {
  throw Error(ErrorCode::PeerLost,
              failure.tag.empty()
                  ? "peer " + failure.peer + " was lost during a tagged transfer: " + failure.error
                  : "the transfer tagged '" + failure.tag + "' from " + failure.peer +
                        " failed: " + failure.error);
}
}  // namespace

Notification PoolState::next(std::chrono::milliseconds timeout) {
  return wait(timeout, [this]() -> std::optional<Notification> {
    if (queue_.empty()) return std::nullopt;
    auto first = std::move(queue_.front());
    queue_.pop_front();
    if (!first.error.empty()) {
      --failures_queued_;
      raise(first);
    }
    return first;
  });
}

Notification PoolState::wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                                     std::string_view from) {
  return wait(timeout, [&]() -> std::optional<Notification> {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (!from.empty() && it->peer != from) continue;
      if (it->error.empty()) {
        if (it->tag != tag) continue;
        auto found = std::move(*it);
        queue_.erase(it);
        return found;
      }
      if (it->tag.empty()) raise(*it);  // a lost peer stays queued: later waits end too
      if (it->tag != tag) continue;
      auto failure = std::move(*it);
      queue_.erase(it);
      --failures_queued_;
      raise(failure);
    }
    return std::nullopt;
  });
}

void PoolState::on_notification(std::function<void(const Notification&)> callback) {
  std::unique_lock lock(mutex_);
  check_open();
  callback_ = callback;
  if (!callback) return;  // queued again from now on
  auto queued = std::move(queue_);
  queue_.clear();
  failures_queued_ = 0;
  lock.unlock();
  for (const auto& notification : queued) callback(notification);
}

std::size_t PoolState::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void PoolState::track(const std::shared_ptr<ActiveTransfer>& transfer) {
  std::lock_guard lock(mutex_);
  check_open();
  std::erase_if(transfers_, [](const auto& weak) {
    auto live = weak.lock();
    return !live || is_terminal(live->status());
  });
  transfers_.push_back(transfer);
}

void PoolState::close(std::chrono::milliseconds grace) {
  std::vector<std::weak_ptr<ActiveTransfer>> transfers;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
    transfers.swap(transfers_);
    queue_.clear();
    failures_queued_ = 0;
    callback_ = nullptr;
  }
  changed_.notify_all();
  for (const auto& weak : transfers) {
    auto transfer = weak.lock();
    if (!transfer) continue;
    transfer->fail(Error(ErrorCode::Cancelled, "its local pool was closed"));
    transfer->gate().close(grace);  // nothing copies into the pool's memory after this
  }
}

}  // namespace memwire::detail
