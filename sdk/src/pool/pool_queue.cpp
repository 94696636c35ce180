// A pool's notification queue and its budgets (PoolOptions): every queued tag counts against
// the queue and its sender's share, kept by what the owner knows of the sender (the name its
// grant gives it, or the connection a shared-token peer came on), never by a name the sender
// chose. Shared-token peers share a part of the queue; the rest is the granted peers' room.
#include "pool/pool_state.hpp"

namespace memwire::detail {

namespace {

[[noreturn]] void refuse(std::size_t queued, const std::string& whose, const char* budget,
                         const std::string& remedy) {
  throw Error(ErrorCode::Transport, "the pool's owner has " + std::to_string(queued) + " " + whose +
                                        " queued and takes no more (PoolOptions::" + budget +
                                        "): " + remedy);
}

}  // namespace

void PoolState::check_room(const Peer& peer, OperationKind kind) const {
  const auto& limits = options_;
  const auto failures = failures_queued_[0] + failures_queued_[1];
  if (queue_.size() - failures >= limits.max_queued_notifications)
    refuse(queue_.size() - failures, "notifications", "max_queued_notifications",
           "it must take some (next_notification, wait_for_tag) or raise the budget");
  if (peer.authenticated) {
    // One granted peer's untaken tags never crowd out another's.
    if (auto count = queued_by_peer_.find(peer.name);
        count != queued_by_peer_.end() && count->second >= limits.max_queued_per_peer)
      refuse(count->second, "notifications of peer '" + peer.name + "'", "max_queued_per_peer",
             "it must take them or raise the budget");
    return;
  }
  if (auto count = queued_by_connection_.find(peer.connection);
      count != queued_by_connection_.end() && count->second >= limits.max_queued_per_connection)
    refuse(count->second, "notifications of this connection under the shared token",
           "max_queued_per_connection", "it must take them or raise the budget");
  if (kind == OperationKind::Read && shared_reads_queued_ >= limits.max_queued_shared_reads)
    refuse(shared_reads_queued_, "tags of reads under the shared token", "max_queued_shared_reads",
           "no wait for writes takes them; it must take them (next_notification, a wait for "
           "TagKinds::Reads) or raise the budget");
  if (shared_queued_ >= limits.max_queued_shared)
    refuse(shared_queued_, "notifications of shared-token peers", "max_queued_shared",
           "the rest is kept for granted peers; it must take some, raise the budget, or grant "
           "this peer a token of its own (Pool::metadata_for)");
}

void PoolState::count(const Queued& queued, int step) {
  const auto& notification = queued.notification;
  const auto by = static_cast<std::size_t>(step);  // +1 or -1, modulo 2^N
  if (!notification.error.empty()) {
    failures_queued_[notification.authenticated] += by;
    return;
  }
  const auto add = [&](auto& map, const auto& key) {
    auto found = map.try_emplace(key, 0).first;
    if ((found->second += by) == 0) map.erase(found);
  };
  if (notification.authenticated) return add(queued_by_peer_, notification.peer);
  add(queued_by_connection_, queued.connection);
  shared_queued_ += by;
  if (notification.kind == OperationKind::Read) shared_reads_queued_ += by;
}

void PoolState::clear_queue() {
  queue_.clear();
  failures_queued_[0] = failures_queued_[1] = 0;
  queued_by_peer_.clear();
  queued_by_connection_.clear();
  shared_queued_ = shared_reads_queued_ = 0;
}

void PoolState::post(Queued queued, std::unique_lock<std::mutex>& lock) {
  if (callback_) {
    auto callback = callback_;
    lock.unlock();
    callback(queued.notification);
    return;
  }
  count(queued, +1);
  queue_.push_back(std::move(queued));
  announce_change(lock);
}

void PoolState::announce_change(std::unique_lock<std::mutex>& lock) {
  // The event loop's fd is raised under the lock the change was made under: no second lock per
  // delivered tag.
  if (readiness_) readiness_->raise();
  lock.unlock();
  changed_.notify_all();
}

void PoolState::deliver(const Peer& peer, std::string tag, OperationKind kind) {
  std::unique_lock lock(mutex_);
  check_open();
  if (!callback_) check_room(peer, kind);
  post({{peer.name, std::move(tag), "", peer.authenticated, peer.request, kind, peer.token},
        ErrorCode::PeerLost,
        peer.connection},
       lock);
}

}  // namespace memwire::detail
