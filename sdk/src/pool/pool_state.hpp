#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/pool_access.hpp"
#include "memwire/error.hpp"
#include "memwire/pool.hpp"
#include "pool/request_grant.hpp"
#include "util/ids.hpp"
#include "util/readiness_signal.hpp"

namespace memwire::detail {

class ActiveTransfer;
class GpuPoolMemory;

// What makes a registration a pool: its geometry, what peers may do, the tags they send, and
// the transfers that use it as their local side (failed and waited for when it closes).
class PoolState final : public PoolAccess {
 public:
  PoolState(PoolOptions options, std::uint64_t generation, std::vector<BlockRegion> regions);

  const PoolOptions& options() const noexcept { return options_; }
  std::uint64_t generation() const noexcept { return generation_; }
  const std::vector<BlockRegion>& regions() const noexcept { return regions_; }
  std::uint64_t block_count() const noexcept { return metadata_->block_count(); }
  // What peers get; set once, before the pool is shared.
  void set_metadata(PoolMetadata metadata) { metadata_.emplace(std::move(metadata)); }
  const PoolMetadata& metadata() const { return *metadata_; }
  // A pool in GPU memory (cuda/gpu_pool_memory.hpp), or null for host memory; set once, before
  // the pool is shared.
  void set_gpu(std::shared_ptr<const GpuPoolMemory> gpu) { gpu_ = std::move(gpu); }
  const std::shared_ptr<const GpuPoolMemory>& gpu() const noexcept { return gpu_; }
  // (region, offset, size) of a local block; throws InvalidArgument past the last one. The
  // metadata describes the same regions.
  PoolMetadata::Place locate(std::uint64_t block) const { return metadata_->locate(block); }

  // Who a peer is: the name of the grant its token belongs to (authenticated), or, under the
  // shared token, the name its Hello chose (a label) and the connection it came on. Throws
  // AccessDenied for any other token, and for a shared-token peer calling itself by a granted
  // name.
  struct Peer {
    std::string name;
    bool authenticated = false;
    std::string request;  // under a request grant's token
    std::string token;    // the one it presented, in hex (Notification::token)
    // Under the shared token: the transport's number for its connection (never reused), which
    // its share of the queue is kept by; 0 under a grant's token (kept by the grant's name).
    std::uint64_t connection = 0;
    friend bool operator==(const Peer&, const Peer&) = default;
  };
  // Which notifications a wait takes: from `from` and under `token` when not empty, of `kinds`.
  // A failure ends a wait only when its transfer passes the same filter.
  struct TagFilter {
    std::string_view from;
    std::string_view token;
    TagKinds kinds = TagKinds::Writes;
  };
  Peer identify(const Id128& token, const Id128& shared_token, std::string_view hello,
                std::uint64_t connection) const;
  // Whether `token` is the shared one, a peer grant's or a live request grant's.
  bool admits(const Id128& token, const Id128& shared_token) const;
  // Throws unless admits(): Cancelled naming the request for a released request grant's token,
  // AccessDenied for any other.
  void check_token(const Id128& token, const Id128& shared_token) const override;
  // check_token, then what the token allows: the pool's options, and a request grant's access
  // and lease.
  void authorize(const Id128& token, const Id128& shared_token, OperationKind kind) const override;

  // What admitting one pool request gives: under a request grant's token, the grant and the pin
  // that holds its release until the request's bytes are in (or out); empty otherwise.
  struct Admission {
    std::shared_ptr<RequestGrant> grant;
    std::optional<AccessGate::Pin> pin;
  };
  // authorize() and, under a request grant's token, the grant's pin and the check of the
  // request's pieces (`check_pieces`, given that grant): the grant is found and pinned in one
  // step under the pool's lock, so a release (which forgets the token under that lock, then
  // waits for the grant's pins) either comes first and this refuses the request, or waits for
  // its bytes; the checks follow on that same grant, before any byte moves.
  Admission admit(const Id128& token, const Id128& shared_token, OperationKind kind,
                  const std::function<void(const RequestGrant&)>& check_pieces) const;

  // Request grants (Pool::grant): a token of their own, checked against their blocks; their
  // lease may be renewed up to `max_lease` from now (at most lease: no renewal).
  std::shared_ptr<RequestGrant> grant_request(std::string peer, RequestScope scope,
                                              std::chrono::milliseconds lease,
                                              std::chrono::milliseconds max_lease,
                                              std::chrono::milliseconds grace);
  // The live request grant of `token`, or null for any other token.
  std::shared_ptr<RequestGrant> request_grant(const Id128& token) const;
  // Ends `grant`: its token is refused from now on, its requests landing finish, the waits for
  // its open transfers' tags end with its error. Idempotent: every call returns once they are
  // in. `lease_over`: the lease's end ends it (its peer hears Expired).
  bool release(const std::shared_ptr<RequestGrant>& grant, std::string_view reason,
               bool lease_over = false);
  // Throws AccessDenied unless bytes [offset, +length) of `region` lie in `grant`'s blocks.
  void check_granted(const RequestGrant& grant, std::uint32_t region, std::uint64_t offset,
                     std::uint64_t length) const;
  // A token of `peer`'s own (the same one while the grant lives); revoke() ends it.
  Id128 grant(const std::string& peer);
  bool revoke(std::string_view peer);

  // Whether bytes that are no block's lie inside the regions' spans (a strided region whose
  // gaps no other region's blocks fill): a transport that can only grant whole spans (verbs
  // keys) must not serve such a pool. Interleaved K/V regions fill each other's gaps.
  bool has_gaps() const noexcept { return has_gaps_; }
  // The run of blocks (regions joined where they meet) that holds all of [data, data + length)
  // in a pool without gaps; empty otherwise. Every byte in it is a block's: what a same-host
  // peer may map to copy blocks itself without seeing anything else.
  std::span<std::byte> block_run_holding(const std::byte* data, std::size_t length) const;
  // Bytes of block `region`, [offset, offset + length): throws AccessDenied unless they lie in
  // the region's blocks (never in the gaps of a strided region).
  void check_blocks(std::uint32_t region, std::uint64_t offset, std::uint64_t length) const;

  // A peer's tag, after its admitted transfer's bytes landed. Throws Error{Transport} naming
  // the budget when the queue, or a share of it the peer counts against (PoolOptions), is
  // full, and Error{Cancelled} once closed: the sender's transfer fails with it.
  void deliver(const Peer& peer, std::string tag, OperationKind kind);
  // A peer's admitted tagged transfer failed or its connection was lost in the middle of it:
  // waits for that tag end with `error`, those whose filter the transfer passes (`kind`, the
  // peer's token and name). A failure with code Cancelled is raised as such (the peer
  // cancelled, or the owner released the grant); any other as PeerLost.
  void fail(const Peer& peer, std::string tag, const Error& error, OperationKind kind);
  // A frame the protocol forbids (a tag with no admitted transfer, a second one, ...).
  void count_fault() noexcept { ++faults_; }
  std::uint64_t faults() const noexcept { return faults_; }
  // A well-formed request refused for what it asked (AccessDenied): blocks outside a grant's
  // or the pool's, an access the pool or the grant does not allow, a wrong token.
  void count_refusal() noexcept { ++refusals_; }
  std::uint64_t refusals() const noexcept { return refusals_; }

  Notification next(std::chrono::milliseconds timeout);
  // `cancelled_prefix` (not empty): a cancellation of any tag that starts with it (a layer
  // stream's) ends the wait too, with that failure, left queued for the stream's other waits.
  Notification wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                            const TagFilter& filter, std::string_view cancelled_prefix = {});
  // The same without waiting: nothing when none is queued yet (an event loop calls these once
  // readiness_fd() was readable).
  std::optional<Notification> try_next();
  // Throws Error{Cancelled}, with close()'s reason, once closed.
  void refuse_if_closed() const;
  std::optional<Notification> try_wait_for_tag(std::string_view tag, const TagFilter& filter);
  // Readable whenever the queue changed or the pool closed since the caller last read it.
  int readiness_fd();
  void on_notification(std::function<void(const Notification&)> callback);
  std::size_t queued() const;

  // Transfers whose local side is this pool.
  void track(const std::shared_ptr<ActiveTransfer>& transfer);
  // Ends every wait with Cancelled (carrying `reason`, when given), fails the transfers that
  // use it, and waits until none touches its memory any more (up to `grace`, then their
  // connections are broken).
  void close(std::chrono::milliseconds grace, std::string_view reason = {}) override;

 private:
  struct Queued;
  // Adds to the queue, or hands to the callback (outside the lock: `lock` is released).
  void post(Queued queued, std::unique_lock<std::mutex>& lock);
  template <class Found>
  Notification wait(std::chrono::milliseconds timeout, Found found);
  void check_open() const;  // mutex_ held
  // mutex_ held: the first queued notification (with this tag and from this peer), taken out of
  // the queue; throws PeerLost when it is a failure.
  std::optional<Notification> take_next();
  std::optional<Notification> take_tag(std::string_view tag, const TagFilter& filter,
                                       std::string_view cancelled_prefix);
  // After the queue changed or the pool closed, `lock` held: wakes both kinds of waiter and
  // releases it.
  void announce_change(std::unique_lock<std::mutex>& lock);

  // Under the lock: throws naming the budget (PoolOptions) a tag of `peer` would exceed.
  void check_room(const Peer& peer, OperationKind kind) const;
  // Under the lock: what a queued entry counts against, as it enters or leaves the queue.
  void count(const Queued& queued, int step);
  // Under the lock: the queue emptied, and every count with it.
  void clear_queue();

  // Failures queued, for granted peers and for shared-token ones apart: a flood of one kind
  // pushes out its own oldest, never the other's.
  static constexpr std::size_t kMostFailuresQueued = 1024;
  static constexpr std::size_t kMostGrants = 65536;
  // Released request grants' tokens remembered, for a clear refusal of a late transfer.
  static constexpr std::size_t kMostReleasedRemembered = 4096;
  // Under the lock: forgets request grants whose lease is over (they admit nothing).
  void drop_expired_requests();

  const PoolOptions options_;
  const std::uint64_t generation_;
  const std::vector<BlockRegion> regions_;
  // Without gaps: the regions' spans, joined and sorted (every byte a block's); else empty.
  const std::vector<std::pair<std::uintptr_t, std::uintptr_t>> block_runs_;
  const bool has_gaps_;
  std::optional<PoolMetadata> metadata_;
  std::shared_ptr<const GpuPoolMemory> gpu_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // Tags and failures (error set) in arrival order.
  struct Queued {
    Notification notification;
    ErrorCode code = ErrorCode::PeerLost;  // a failure's: Cancelled is raised as such
    std::uint64_t connection = 0;          // Peer::connection
  };
  std::deque<Queued> queue_;
  std::size_t failures_queued_[2] = {0, 0};  // [authenticated]
  // The shares (PoolOptions): granted peers' tags by name, shared-token ones by connection,
  // all shared-token ones, and their reads.
  std::map<std::string, std::size_t, std::less<>> queued_by_peer_;
  std::unordered_map<std::uint64_t, std::size_t> queued_by_connection_;
  std::size_t shared_queued_ = 0;
  std::size_t shared_reads_queued_ = 0;
  std::unordered_map<Id128, std::string, Id128Hash, Id128Equal> grantee_;  // token -> peer
  std::map<std::string, Id128, std::less<>> grants_;
  std::unordered_map<Id128, std::shared_ptr<RequestGrant>, Id128Hash, Id128Equal> requests_;
  std::unordered_map<Id128, Error, Id128Hash, Id128Equal>
      released_;  // token -> what its peer hears
  std::deque<Id128> released_order_;
  std::vector<std::uint64_t> first_block_;  // of each region
  std::atomic<std::uint64_t> faults_{0};
  std::atomic<std::uint64_t> refusals_{0};
  std::function<void(const Notification&)> callback_;
  std::optional<ReadinessSignal> readiness_;  // made at the first readiness_fd()
  bool closed_ = false;
  std::string closed_because_;  // the owner's reason, from close()
  std::vector<std::weak_ptr<ActiveTransfer>> transfers_;
};

}  // namespace memwire::detail
