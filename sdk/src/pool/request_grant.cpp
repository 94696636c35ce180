#include "pool/request_grant.hpp"

namespace memwire::detail {

namespace {
bool allows(Access access, OperationKind kind) {
  const auto wanted = kind == OperationKind::Read ? Access::Read : Access::Write;
  return (static_cast<unsigned>(access) & static_cast<unsigned>(wanted)) != 0;
}
}  // namespace

void RequestGrant::check(OperationKind kind) const {
  if (released()) throw released_error();
  if (lease_over()) throw lease_over_error(scope_.request);
  if (!allows(scope_.access, kind))
    throw Error(ErrorCode::AccessDenied, "the grant for request " + scope_.request +
                                             " allows no remote " + std::string(to_string(kind)));
}

std::chrono::steady_clock::time_point RequestGrant::renew(std::chrono::milliseconds extension) {
  if (extension.count() <= 0) throw Error(ErrorCode::InvalidArgument, "a renewal of at least 1 ms");
  const auto wanted = std::min(std::chrono::steady_clock::now() + extension, renew_limit_);
  auto current = expires_at_.load(std::memory_order_acquire);
  for (;;) {
    if (released()) throw released_error();
    // Checked against the value the exchange replaces: a lease seen over is never revived.
    if (std::chrono::steady_clock::now().time_since_epoch().count() >= current)
      throw lease_over_error(scope_.request);
    const auto next = std::max(current, wanted.time_since_epoch().count());
    if (expires_at_.compare_exchange_weak(current, next, std::memory_order_acq_rel))
      return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(next));
  }
}

void RequestGrant::check_blocks(std::uint64_t first, std::uint64_t count) const {
  if (scope_.run_holding(first, count) < 0)
    throw Error(ErrorCode::AccessDenied, "blocks " + std::to_string(first) + " to " +
                                             std::to_string(first + count - 1) +
                                             " are not granted for request " + scope_.request);
}

void RequestGrant::opened(const OpenTag& tag) {
  std::lock_guard lock(mutex_);
  if (released_) throw released_error();
  if (open_tags_.size() >= kMostOpenTags && !open_tags_.contains(tag))
    throw Error(ErrorCode::Transport, "more than " + std::to_string(kMostOpenTags) +
                                          " tagged transfers open under the grant for request " +
                                          scope_.request);
  ++open_tags_[tag];
}

std::optional<Error> RequestGrant::finish(const OpenTag& tag,
                                          const std::function<void()>& deliver) {
  std::lock_guard lock(mutex_);
  if (released_) return released_error();
  deliver();  // when it throws, the transfer is still open here: closed() ends it
  if (auto found = open_tags_.find(tag); found != open_tags_.end() && --found->second == 0)
    open_tags_.erase(found);
  return std::nullopt;
}

bool RequestGrant::closed(const OpenTag& tag) {
  std::lock_guard lock(mutex_);
  if (released_) return false;
  if (auto found = open_tags_.find(tag); found != open_tags_.end() && --found->second == 0)
    open_tags_.erase(found);
  return true;
}

std::optional<std::vector<RequestGrant::OpenTag>> RequestGrant::release(std::string_view reason,
                                                                        bool lease_over) {
  std::vector<OpenTag> open;
  std::vector<std::function<void()>> hooks;
  {
    std::unique_lock lock(mutex_);
    if (released_) {
      // Ended by another call, perhaps still waiting for the requests landing or running the
      // hooks (verbs windows): this one returns once that call is through too. Owners' threads
      // release grants, never a transport's: the first call needs nothing of this thread.
      ended_.wait(lock, [&] { return hooks_ran_; });
      return std::nullopt;
    }
    released_ = true;
    expired_ = lease_over;
    reason_ = reason;
    for (const auto& [tag, count] : open_tags_) open.insert(open.end(), count, tag);
    open_tags_.clear();
    hooks.swap(hooks_);
  }
  // Nothing lands in the blocks once this returns: requests under way finish, or their
  // connections are cut.
  gate_.close(grace_);
  for (auto& hook : hooks) hook();
  {
    std::lock_guard lock(mutex_);
    hooks_ran_ = true;
  }
  ended_.notify_all();
  return open;
}

bool RequestGrant::released() const {
  std::lock_guard lock(mutex_);
  return released_;
}

std::string released_message(std::string_view request, std::string_view reason) {
  auto message = "blocks released by the owner for request " + std::string(request);
  if (!reason.empty()) message += ": " + std::string(reason);
  return message;
}

Error lease_over_error(std::string_view request) {
  return Error(ErrorCode::Expired, "the lease on the blocks of request " + std::string(request) +
                                       " ended: the owner no longer admits transfers for it");
}

Error RequestGrant::released_error() const {
  // mutex_ may be held by the caller: reason_ and expired_ are written once, before released_
  // is seen.
  if (expired_) return lease_over_error(scope_.request);
  return Error(ErrorCode::Cancelled, released_message(scope_.request, reason_));
}

void RequestGrant::on_release(std::function<void()> hook) {
  {
    std::lock_guard lock(mutex_);
    if (!released_) {
      hooks_.push_back(std::move(hook));
      return;
    }
  }
  hook();
}

}  // namespace memwire::detail
