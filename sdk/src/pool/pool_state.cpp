#include "pool/pool_state.hpp"

#include <algorithm>

#include "core/active_transfer.hpp"
#include "util/test_hooks.hpp"

namespace memwire::detail {

namespace {

using Interval = std::pair<std::uintptr_t, std::uintptr_t>;  // [first, last)

// Sorted, with touching and overlapping intervals joined.
std::vector<Interval> joined(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> out;
  for (const auto& interval : intervals) {
    if (!out.empty() && interval.first <= out.back().second)
      out.back().second = std::max(out.back().second, interval.second);
    else
      out.push_back(interval);
  }
  return out;
}

// The regions' spans, joined, when every byte in them is some region's block; nullopt when
// bytes that are no block's lie inside (a strided region's gaps no other region fills). Blocks
// are listed one by one for strided regions, up to kMostListed; past that the answer is
// "gaps", which only costs such a pool the transports that grant (or map) whole spans.
std::optional<std::vector<Interval>> runs_without_gaps(const std::vector<BlockRegion>& regions) {
  constexpr std::uint64_t kMostListed = 1u << 20;
  std::vector<Interval> spans, blocks;
  std::uint64_t listed = 0;
  for (const auto& region : regions) {
    const auto base = reinterpret_cast<std::uintptr_t>(region.base);
    const auto stride = region.stride == 0 ? region.block_size : region.stride;
    spans.emplace_back(base, base + (region.count - 1) * stride + region.block_size);
    if (stride == region.block_size) {
      blocks.push_back(spans.back());
      continue;
    }
    if ((listed += region.count) > kMostListed) return std::nullopt;
    for (std::uint64_t i = 0; i < region.count; ++i)
      blocks.emplace_back(base + i * stride, base + i * stride + region.block_size);
  }
  auto joined_spans = joined(std::move(spans));
  if (joined_spans != joined(std::move(blocks))) return std::nullopt;
  return joined_spans;
}

}  // namespace

PoolState::PoolState(PoolOptions options, std::uint64_t generation,
                     std::vector<BlockRegion> regions)
    : options_(std::move(options)),
      generation_(generation),
      regions_(std::move(regions)),
      block_runs_(runs_without_gaps(regions_).value_or(std::vector<Interval>{})),
      has_gaps_(!regions_.empty() && block_runs_.empty()) {
  std::uint64_t first = 0;
  for (const auto& region : regions_) {
    first_block_.push_back(first);
    first += region.count;
  }
}

void PoolState::check_open() const {
  if (closed_)
    throw Error(ErrorCode::Cancelled,
                "the pool was closed by its owner" +
                    (closed_because_.empty() ? std::string() : ": " + closed_because_));
}

PoolState::Peer PoolState::identify(const Id128& token, const Id128& shared_token,
                                    std::string_view hello, std::uint64_t connection) const {
  std::lock_guard lock(mutex_);
  if (equal_in_constant_time(token, shared_token)) {
    // A label of the peer's choosing: it may not pass for a peer the owner granted access.
    if (grants_.contains(hello))
      throw Error(ErrorCode::AccessDenied,
                  "peer '" + std::string(hello) +
                      "' holds a grant of its own: it must use the metadata made for it");
    return {std::string(hello), false, {}, to_hex(token), connection};
  }
  if (auto found = grantee_.find(token); found != grantee_.end())
    return {found->second, true, {}, to_hex(token)};
  if (auto found = requests_.find(token); found != requests_.end())
    return {found->second->peer(), true, found->second->request(), to_hex(token)};
  if (auto found = released_.find(token); found != released_.end()) throw found->second;
  throw Error(ErrorCode::AccessDenied, "wrong access token");
}

bool PoolState::admits(const Id128& token, const Id128& shared_token) const {
  if (equal_in_constant_time(token, shared_token)) return true;
  std::lock_guard lock(mutex_);
  return grantee_.contains(token) || requests_.contains(token);
}

void PoolState::check_token(const Id128& token, const Id128& shared_token) const {
  if (admits(token, shared_token)) return;
  std::lock_guard lock(mutex_);
  if (auto found = released_.find(token); found != released_.end()) throw found->second;
  throw Error(ErrorCode::AccessDenied, "wrong access token");
}

void PoolState::authorize(const Id128& token, const Id128& shared_token, OperationKind kind) const {
  check_token(token, shared_token);
  const bool allowed = kind == OperationKind::Read ? options_.remote_read : options_.remote_write;
  if (!allowed)
    throw Error(ErrorCode::AccessDenied, "pool allows no remote " + std::string(to_string(kind)));
  if (auto grant = request_grant(token)) grant->check(kind);
}

PoolState::Admission PoolState::admit(
    const Id128& token, const Id128& shared_token, OperationKind kind,
    const std::function<void(const RequestGrant&)>& check_pieces) const {
  const bool allowed = kind == OperationKind::Read ? options_.remote_read : options_.remote_write;
  const auto refuse_kind = [&] {
    if (!allowed)
      throw Error(ErrorCode::AccessDenied, "pool allows no remote " + std::string(to_string(kind)));
  };
  if (equal_in_constant_time(token, shared_token)) {
    refuse_kind();
    return {};
  }
  Admission admission;
  {
    // Found and pinned under the lock release() forgets the token under: a release either
    // came first (the token is gone) or waits for this pin. Only the gate's lock is taken
    // inside; the grant's own is not (RequestGrant::finish holds it while it delivers).
    std::lock_guard lock(mutex_);
    auto request = requests_.find(token);
    if (request == requests_.end()) {
      if (grantee_.contains(token)) {
        refuse_kind();
        return {};
      }
      if (auto found = released_.find(token); found != released_.end()) throw found->second;
      throw Error(ErrorCode::AccessDenied, "wrong access token");
    }
    admission.grant = request->second;
    if (auto widen = test_hooks::between_grant_lookup_and_pin.load()) widen();
    admission.pin = admission.grant->pin();
  }
  const auto& grant = *admission.grant;
  if (!admission.pin) throw grant.released_error();  // released, its token not yet forgotten
  refuse_kind();
  grant.check(kind);  // released since, lease, access: the pin goes with the refusal
  check_pieces(grant);
  return admission;
}

std::shared_ptr<RequestGrant> PoolState::grant_request(std::string peer, RequestScope scope,
                                                       std::chrono::milliseconds lease,
                                                       std::chrono::milliseconds max_lease,
                                                       std::chrono::milliseconds grace) {
  if (lease.count() <= 0) throw Error(ErrorCode::InvalidArgument, "a lease of at least 1 ms");
  if (max_lease.count() != 0 && max_lease < lease)
    throw Error(ErrorCode::InvalidArgument, "a max_lease below the lease");
  std::lock_guard lock(mutex_);
  check_open();
  if (requests_.size() >= options_.max_request_grants) drop_expired_requests();
  if (requests_.size() >= options_.max_request_grants)
    throw Error(ErrorCode::InvalidArgument,
                "the pool has " + std::to_string(requests_.size()) +
                    " request grants live (max_request_grants): release some first");
  const auto now = std::chrono::steady_clock::now();
  auto grant = std::make_shared<RequestGrant>(random_id(), std::move(peer), std::move(scope),
                                              now + lease, now + std::max(lease, max_lease), grace);
  requests_.emplace(grant->token(), grant);
  return grant;
}

std::shared_ptr<RequestGrant> PoolState::request_grant(const Id128& token) const {
  std::lock_guard lock(mutex_);
  auto found = requests_.find(token);
  return found == requests_.end() ? nullptr : found->second;
}

void PoolState::drop_expired_requests() {
  std::erase_if(requests_, [](const auto& entry) { return entry.second->lease_over(); });
}

bool PoolState::release(const std::shared_ptr<RequestGrant>& grant, std::string_view reason,
                        bool lease_over) {
  {
    std::lock_guard lock(mutex_);
    if (requests_.erase(grant->token()) != 0) {
      released_.emplace(
          grant->token(),
          lease_over ? lease_over_error(grant->request())
                     : Error(ErrorCode::Cancelled, released_message(grant->request(), reason)));
      released_order_.push_back(grant->token());
      if (released_order_.size() > kMostReleasedRemembered) {
        released_.erase(released_order_.front());
        released_order_.pop_front();
      }
    }
  }
  auto open = grant->release(reason, lease_over);
  if (!open) return false;
  const auto error = grant->released_error();
  const Peer peer{grant->peer(), true, grant->request(), to_hex(grant->token())};
  for (auto& [tag, kind] : *open) fail(peer, std::move(tag), error, kind);
  return true;
}

void PoolState::check_granted(const RequestGrant& grant, std::uint32_t region, std::uint64_t offset,
                              std::uint64_t length) const {
  if (region >= regions_.size() || length == 0)
    throw Error(ErrorCode::AccessDenied, "region " + std::to_string(region) + " out of range");
  const auto& blocks = regions_[region];
  const auto stride = blocks.stride == 0 ? blocks.block_size : blocks.stride;
  const auto first = offset / stride, last = (offset + length - 1) / stride;
  if (last >= blocks.count)
    throw Error(ErrorCode::AccessDenied, "past the last block of region " + std::to_string(region));
  grant.check_blocks(first_block_[region] + first, last - first + 1);
}

Id128 PoolState::grant(const std::string& peer) {
  std::lock_guard lock(mutex_);
  check_open();
  if (auto found = grants_.find(peer); found != grants_.end()) return found->second;
  if (grants_.size() == kMostGrants)
    throw Error(ErrorCode::InvalidArgument,
                "a pool grants at most " + std::to_string(kMostGrants) + " peers");
  const auto token = random_id();
  grants_.emplace(peer, token);
  grantee_.emplace(token, peer);
  return token;
}

bool PoolState::revoke(std::string_view peer) {
  std::lock_guard lock(mutex_);
  auto found = grants_.find(peer);
  if (found == grants_.end()) return false;
  grantee_.erase(found->second);
  grants_.erase(found);
  return true;
}

std::span<std::byte> PoolState::block_run_holding(const std::byte* data, std::size_t length) const {
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  // The last run that starts at or before `data`: the only one that may hold it.
  auto run =
      std::upper_bound(block_runs_.begin(), block_runs_.end(), first,
                       [](std::uintptr_t at, const Interval& run) { return at < run.first; });
  if (run == block_runs_.begin()) return {};
  --run;
  if (first >= run->second || length > run->second - first) return {};
  return {reinterpret_cast<std::byte*>(run->first), run->second - run->first};
}

void PoolState::check_blocks(std::uint32_t region, std::uint64_t offset,
                             std::uint64_t length) const {
  if (region >= regions_.size())
    throw Error(ErrorCode::AccessDenied, "region " + std::to_string(region) + " out of range");
  const auto& blocks = regions_[region];
  if (blocks.stride == blocks.block_size) return;  // no gaps: the region's bounds are the blocks'
  // Blocks with gaps between them never coalesce: a piece is one block or part of one.
  if (length > blocks.block_size || offset % blocks.stride > blocks.block_size - length)
    throw Error(ErrorCode::AccessDenied,
                "range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                    ") of region " + std::to_string(region) +
                    " is not inside one block: the bytes between blocks are not the pool's");
}

void PoolState::fail(const Peer& peer, std::string tag, const Error& error, OperationKind kind) {
  if (tag.empty()) return;  // an untagged transfer: no wait is for it
  std::unique_lock lock(mutex_);
  if (closed_) return;
  if (!callback_ && failures_queued_[peer.authenticated] == kMostFailuresQueued) {
    // Under the shared token the new failure is dropped (a wait for its tag runs to its
    // timeout): finding the oldest is a walk of the queue under the pool's lock, and a flood of
    // refused transfers would make each refusal pay it while the granted peers' tags wait.
    if (!peer.authenticated) return;
    // A granted peer's oldest failure goes: it must not grow the queue failing over and over.
    auto oldest = std::find_if(queue_.begin(), queue_.end(), [&](const Queued& queued) {
      return !queued.notification.error.empty() &&
             queued.notification.authenticated == peer.authenticated;
    });
    count(*oldest, -1);
    queue_.erase(oldest);
  }
  try {
    post({{peer.name, std::move(tag), error.what(), peer.authenticated, peer.request, kind,
           peer.token},
          error.code() == ErrorCode::Cancelled ? ErrorCode::Cancelled : ErrorCode::PeerLost,
          peer.connection},
         lock);
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
[[noreturn]] void raise(const Notification& failure, ErrorCode code) {
  throw Error(code, "the transfer tagged '" + failure.tag + "' from " + failure.peer +
                        (code == ErrorCode::Cancelled ? " was cancelled: " : " failed: ") +
                        failure.error);
}
}  // namespace

std::optional<Notification> PoolState::take_next() {
  if (queue_.empty()) return std::nullopt;
  auto first = std::move(queue_.front());
  queue_.pop_front();
  count(first, -1);
  if (!first.notification.error.empty()) raise(first.notification, first.code);
  return std::move(first.notification);
}

namespace {
bool passes(const Notification& notification, const PoolState::TagFilter& filter) {
  const auto kind = notification.kind == OperationKind::Read ? TagKinds::Reads : TagKinds::Writes;
  return (static_cast<unsigned>(filter.kinds) & static_cast<unsigned>(kind)) != 0 &&
         (filter.from.empty() || notification.peer == filter.from) &&
         (filter.token.empty() || notification.token == filter.token);
}
}  // namespace

std::optional<Notification> PoolState::take_tag(std::string_view tag, const TagFilter& filter,
                                                std::string_view cancelled_prefix) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const auto& queued = it->notification;
    // What the wait did not ask for, tag or failure, is another wait's.
    if (!passes(queued, filter)) continue;
    if (queued.tag != tag) {
      // The stream was cancelled: every wait of it ends, the failure stays for the others.
      if (!cancelled_prefix.empty() && it->code == ErrorCode::Cancelled && !queued.error.empty() &&
          queued.tag.starts_with(cancelled_prefix))
        raise(queued, it->code);
      continue;
    }
    // A stream's cancellation stays queued: it ends the stream's other waits too.
    if (!cancelled_prefix.empty() && it->code == ErrorCode::Cancelled && !queued.error.empty())
      raise(queued, it->code);
    auto found = std::move(*it);
    queue_.erase(it);
    count(found, -1);
    if (!found.notification.error.empty()) raise(found.notification, found.code);
    return std::move(found.notification);
  }
  return std::nullopt;
}

Notification PoolState::next(std::chrono::milliseconds timeout) {
  return wait(timeout, [this] { return take_next(); });
}

Notification PoolState::wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                                     const TagFilter& filter, std::string_view cancelled_prefix) {
  return wait(timeout, [&] { return take_tag(tag, filter, cancelled_prefix); });
}

void PoolState::refuse_if_closed() const {
  std::lock_guard lock(mutex_);
  check_open();
}

std::optional<Notification> PoolState::try_next() {
  std::lock_guard lock(mutex_);
  check_open();
  return take_next();
}

std::optional<Notification> PoolState::try_wait_for_tag(std::string_view tag,
                                                        const TagFilter& filter) {
  std::lock_guard lock(mutex_);
  check_open();
  return take_tag(tag, filter, {});
}

int PoolState::readiness_fd() {
  std::lock_guard lock(mutex_);
  if (!readiness_) {
    readiness_.emplace();
    // Whatever is queued (or a close) already counts as a change the caller has not seen.
    if (!queue_.empty() || closed_) readiness_->raise();
  }
  return readiness_->fd();
}

void PoolState::on_notification(std::function<void(const Notification&)> callback) {
  std::unique_lock lock(mutex_);
  check_open();
  callback_ = callback;
  if (!callback) return;  // queued again from now on
  auto queued = std::move(queue_);
  clear_queue();
  lock.unlock();
  for (const auto& entry : queued) callback(entry.notification);
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

void PoolState::close(std::chrono::milliseconds grace, std::string_view reason) {
  std::vector<std::weak_ptr<ActiveTransfer>> transfers;
  {
    std::unique_lock lock(mutex_);
    if (closed_) return;
    closed_ = true;
    closed_because_ = reason;
    transfers.swap(transfers_);
    clear_queue();
    grants_.clear();
    grantee_.clear();
    requests_.clear();
    callback_ = nullptr;
    announce_change(lock);
  }
  for (const auto& weak : transfers) {
    auto transfer = weak.lock();
    if (!transfer) continue;
    transfer->fail(Error(ErrorCode::Cancelled, "its local pool was closed"));
    transfer->gate().close(grace);  // nothing copies into the pool's memory after this
  }
}

}  // namespace memwire::detail
