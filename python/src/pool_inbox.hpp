#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "memwire/memwire.hpp"

namespace memwire_python {

// A pool's notifications as the binding keeps them. memwire hands each one to this inbox on its
// I/O thread (Pool::on_notification, set before the metadata leaves the process), which queues
// it without the GIL and makes an eventfd readable: blocking waits sleep on the condition
// variable (GIL released), an event loop watches the eventfd and takes what it waits for on its
// own thread, so an abandoned asyncio wait never takes a notification with it. Same rules as
// memwire's own queue: a tag past max_queued_notifications fails its sender; failures end the
// waits that concern them (at most kMostFailuresQueued kept); a returning peer clears its loss.
class PoolInbox {
 public:
  explicit PoolInbox(std::size_t max_queued)
      : max_queued_(max_queued), fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw memwire::Error(memwire::ErrorCode::Transport, "eventfd failed");
  }
  ~PoolInbox() { ::close(fd_); }
  PoolInbox(const PoolInbox&) = delete;
  PoolInbox& operator=(const PoolInbox&) = delete;

  int fd() const noexcept { return fd_; }

  // On memwire's I/O thread. Throws (the sender's transfer fails) when a tag finds no room.
  void post(const memwire::Notification& notification) {
    {
      std::lock_guard lock(mutex_);
      if (notification.error.empty()) {
        if (closed_)
          throw memwire::Error(memwire::ErrorCode::Cancelled, "the pool was closed by its owner");
        if (queue_.size() - failures_ >= max_queued_)
          throw memwire::Error(memwire::ErrorCode::Transport,
                               "the pool's owner has " + std::to_string(max_queued_) +
                                   " notifications queued and takes no more "
                                   "(max_queued_notifications)");
        std::erase_if(queue_, [&](const memwire::Notification& queued) {
          const bool stale =
              !queued.error.empty() && queued.tag.empty() && queued.peer == notification.peer;
          failures_ -= stale ? 1 : 0;
          return stale;
        });
      } else {
        if (closed_) return;
        if (failures_ == kMostFailuresQueued) {
          auto oldest = std::find_if(queue_.begin(), queue_.end(),
                                     [](const auto& queued) { return !queued.error.empty(); });
          queue_.erase(oldest);
          --failures_;
        }
        ++failures_;
      }
      queue_.push_back(notification);
    }
    changed_.notify_all();
    wake();
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      closed_ = true;
      queue_.clear();
      failures_ = 0;
    }
    changed_.notify_all();
    wake();
  }

  // Blocking (the caller released the GIL). Throws Timeout, PeerLost, Cancelled.
  memwire::Notification next(milliseconds timeout) {
    return wait(timeout, [this] { return take_next(); });
  }
  memwire::Notification wait_for_tag(const std::string& tag, milliseconds timeout,
                                     const std::string& from) {
    return wait(timeout, [&] { return take_tag(tag, from); });
  }
  // Without waiting: nothing when none fits yet (an event loop calls these when woken).
  std::optional<memwire::Notification> try_next() {
    std::lock_guard lock(mutex_);
    check_open();
    return take_next();
  }
  std::optional<memwire::Notification> try_tag(const std::string& tag, const std::string& from) {
    std::lock_guard lock(mutex_);
    check_open();
    return take_tag(tag, from);
  }
  // Empties the eventfd's counter; the loop then looks at the queue.
  void drain() noexcept {
    std::uint64_t count = 0;
    if (::read(fd_, &count, sizeof count) < 0) {
      // EAGAIN: nothing signalled since the last drain.
    }
  }
  std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }
  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

 private:
  static constexpr std::size_t kMostFailuresQueued = 1024;

  void wake() noexcept {
    const std::uint64_t one = 1;
    if (::write(fd_, &one, sizeof one) < 0) {
      // EAGAIN only when the counter is full, i.e. already readable.
    }
  }
  void check_open() const {  // mutex_ held
    if (closed_) throw memwire::Error(memwire::ErrorCode::Cancelled, "the pool was closed");
  }
  [[noreturn]] static void raise(const memwire::Notification& failure) {
    throw memwire::Error(
        memwire::ErrorCode::PeerLost,
        failure.tag.empty()
            ? "peer " + failure.peer + " was lost during a tagged transfer: " + failure.error
            : "the transfer tagged '" + failure.tag + "' from " + failure.peer +
                  " failed: " + failure.error);
  }
  // mutex_ held.
  std::optional<memwire::Notification> take_next() {
    if (queue_.empty()) return std::nullopt;
    auto first = std::move(queue_.front());
    queue_.pop_front();
    if (!first.error.empty()) {
      --failures_;
      raise(first);
    }
    return first;
  }
  std::optional<memwire::Notification> take_tag(const std::string& tag, const std::string& from) {
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
      --failures_;
      raise(failure);
    }
    return std::nullopt;
  }
  template <class Found>
  memwire::Notification wait(milliseconds timeout, Found found) {
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      check_open();
      if (auto taken = found()) return std::move(*taken);
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
        check_open();
        if (auto taken = found()) return std::move(*taken);
        throw memwire::Error(memwire::ErrorCode::Timeout,
                             "no notification within " + std::to_string(timeout.count()) + " ms");
      }
    }
  }

  const std::size_t max_queued_;
  const int fd_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<memwire::Notification> queue_;
  std::size_t failures_ = 0;
  bool closed_ = false;
};

}  // namespace memwire_python
