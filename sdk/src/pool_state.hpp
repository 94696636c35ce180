#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/pool.hpp"

namespace memwire::detail {

class ActiveTransfer;

// What makes a registration a pool: its geometry, what peers may do, the tags they send, and
// the transfers that use it as their local side (failed and waited for when it closes).
class PoolState {
 public:
  PoolState(PoolOptions options, std::uint64_t generation, std::vector<BlockRegion> regions);

  const PoolOptions& options() const noexcept { return options_; }
  std::uint64_t generation() const noexcept { return generation_; }
  const std::vector<BlockRegion>& regions() const noexcept { return regions_; }
  std::uint64_t block_count() const noexcept { return metadata_->block_count(); }
  // What peers get; set once, before the pool is shared.
  void set_metadata(PoolMetadata metadata) { metadata_.emplace(std::move(metadata)); }
  const PoolMetadata& metadata() const { return *metadata_; }
  // (region, offset, size) of a local block; throws InvalidArgument past the last one. The
  // metadata describes the same regions.
  PoolMetadata::Place locate(std::uint64_t block) const { return metadata_->locate(block); }

  // A peer's tag, after its bytes landed. Throws Error{Transport} when the queue is full and
  // Error{Cancelled} once closed: the sender's transfer fails with it.
  void deliver(std::string peer, std::string tag);
  // A peer's tagged transfer failed (`tag` known) or the peer was lost in the middle of one
  // (`tag` empty): waits that concern it end with `error`.
  void fail(std::string peer, std::string tag, const Error& error);

  Notification next(std::chrono::milliseconds timeout);
  Notification wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                            std::string_view from);
  void on_notification(std::function<void(const Notification&)> callback);
  std::size_t queued() const;

  // Transfers whose local side is this pool.
  void track(const std::shared_ptr<ActiveTransfer>& transfer);
  // Ends every wait with Cancelled, fails the transfers that use it, and waits until none
  // touches its memory any more (up to `grace`, then their connections are broken).
  void close(std::chrono::milliseconds grace);

 private:
  // Adds to the queue, or hands to the callback (outside the lock: `lock` is released).
  void post(Notification notification, std::unique_lock<std::mutex>& lock);
  template <class Found>
  Notification wait(std::chrono::milliseconds timeout, Found found);
  void check_open() const;  // mutex_ held

  static constexpr std::size_t kMostFailuresQueued = 1024;

  const PoolOptions options_;
  const std::uint64_t generation_;
  const std::vector<BlockRegion> regions_;
  std::optional<PoolMetadata> metadata_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // Tags and failures (error set) in arrival order.
  std::deque<Notification> queue_;
  std::size_t failures_queued_ = 0;
  std::function<void(const Notification&)> callback_;
  bool closed_ = false;
  std::vector<std::weak_ptr<ActiveTransfer>> transfers_;
};

}  // namespace memwire::detail
