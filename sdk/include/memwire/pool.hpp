#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/device.hpp"
#include "memwire/export.hpp"
#include "memwire/metadata.hpp"
#include "memwire/operation.hpp"
#include "memwire/pool_metadata.hpp"
#include "memwire/request_scope.hpp"

namespace memwire {

class BlockGrant;
class Connector;
class LayerReceiver;
namespace detail {
class Registration;
class PoolState;
}  // namespace detail

// Pools: what KV-cache engines use beside the one-shot operations. A pool is registered once
// (regions cut into equal blocks), its compact metadata is handed to peers once, and then any
// number of transfers move lists of blocks by index between two pools, each optionally
// followed by a tag that the passive side receives only after the bytes are in its memory.

// One region of a pool: `count` blocks of `block_size` bytes, block i at base + i * stride.
struct MEMWIRE_API BlockRegion {
  void* base = nullptr;
  std::uint64_t block_size = 0;
  std::uint64_t stride = 0;  // 0 means block_size (blocks back to back)
  std::uint64_t count = 0;
  Device device{};
};

// A block of the remote pool paired with one of the local pool. Blocks are numbered across the
// regions in order: region 0's blocks first, then region 1's, ...
struct MEMWIRE_API BlockPair {
  std::uint64_t remote = 0;
  std::uint64_t local = 0;
  // Only in a sliced transfer (BlockSlice): added to the slice's offsets in this pair's blocks,
  // so that several small blocks fill one larger block, e.g. four prefill blocks of b bytes into
  // one decode block: {.remote = r + i, .local = l, .local_offset = i * b} for i in 0..3.
  std::uint64_t remote_offset = 0;
  std::uint64_t local_offset = 0;
  friend bool operator==(const BlockPair&, const BlockPair&) = default;
};

// Part of every pair's blocks, for pools whose blocks hold different shares of a KV cache
// (tensor parallelism of different sizes on the two sides): bytes [remote_offset + the pair's,
// + length) of each remote block move to (or from) [local_offset + the pair's, + length) of its
// local block. The blocks need not be the same size; the slice must fit both, for every pair:
//   decode TP 2 rank k reading prefill TP 1 blocks of B bytes into its blocks of B/2:
//     {.remote_offset = k * B / 2, .length = B / 2}
//   decode TP 1 gathering its blocks of B bytes from prefill TP 2 ranks (blocks of B/2), one
//   transfer per rank k: {.local_offset = k * B / 2, .length = B / 2}
struct MEMWIRE_API BlockSlice {
  std::uint64_t remote_offset = 0;
  std::uint64_t local_offset = 0;
  std::uint64_t length = 0;  // at least 1
  friend bool operator==(const BlockSlice&, const BlockSlice&) = default;
};

struct MEMWIRE_API PoolOptions {
  std::string name;          // shown in metadata and errors ("kv", "layer-cache", ...)
  bool remote_read = true;   // peers may read blocks
  bool remote_write = true;  // peers may write blocks
  // Budgets of tags received and not yet taken (callbacks are not queued: they bound their own).
  // Each tag counts against the queue and its sender's share; one more than either allows is
  // refused, and the sender's transfer fails with an error naming the budget to raise. A share
  // is keyed by what the owner knows, never by the name a shared-token peer gives itself.
  // Memory per queued tag is bounded by kMaxTagBytes.
  //   Everything queued.
  std::size_t max_queued_notifications = 65536;
  //   One granted peer's (metadata_for, or Pool::grant; keyed by the name its grant gives it):
  //   a granted peer whose tags nobody takes has its next tagged transfers refused, while the
  //   others' go on.
  std::size_t max_queued_per_peer = 16384;
  //   All shared-token peers' (metadata()) together. The rest of the queue is room that only
  //   granted peers use: a flood under the shared token, whatever names it gives itself, never
  //   refuses a granted peer's tag. None is left when this is not below
  //   max_queued_notifications (lower both together).
  std::size_t max_queued_shared = 16384;
  //   One connection's under the shared token (a connection the transport accepted, whatever
  //   its Hello said), so that one flooding connector leaves the shared share to the others.
  std::size_t max_queued_per_connection = 4096;
  //   Tags of reads under the shared token, together. A read's tag proves no byte landed, and
  //   waits take writes unless asked for reads, so such tags sit queued until next_notification
  //   or a wait for TagKinds::Reads takes them: a flood of tagged reads takes this much at most,
  //   never the room of shared-token writes.
  std::size_t max_queued_shared_reads = 4096;
  // Request grants (Pool::grant) live at once, released and expired ones not counted.
  std::size_t max_request_grants = 4096;
};

// The tag of a transfer this pool's owner admitted, delivered once, after the transfer's bytes
// were in this pool's memory (a write), or after the peer had them all (a read: nothing landed
// here). A notice that belongs to no admitted transfer is refused as a fault of the peer
// (Pool::peer_faults()).
struct MEMWIRE_API Notification {
  // Who sent it. With `authenticated`, the name of the grant (Pool::metadata_for) whose token
  // the transfer was admitted with: the owner's own word. Without it, the transfer used the
  // pool's shared token, and this is the name the peer gave itself: a label that any holder of
  // the shared token may claim (except a granted name). Filter on it (`from`) only with grants.
  std::string peer;
  std::string tag;
  // Only given to on_notification's callback: non-empty when the peer's tagged transfer failed
  // (`tag` set) or the peer was lost in the middle of one (`tag` empty).
  std::string error;
  bool authenticated = false;
  // The request whose grant (Pool::grant) admitted the transfer; empty under other tokens.
  std::string request;
  // What the transfer did here: only a Write proves that bytes landed in this pool.
  OperationKind kind = OperationKind::Write;
  // The token it was admitted with, as the metadata its peer used carries it: metadata()'s
  // (shared: any holder), metadata_for(peer)'s, or a BlockGrant's metadata().token(). The
  // owner's own word of who may have sent it, unlike `peer` under the shared token.
  std::string token;
  friend bool operator==(const Notification&, const Notification&) = default;
};

// The transfers whose notifications a wait for a tag takes: writes unless asked otherwise (a
// read's tag says the peer had the bytes, never that any landed in the pool).
enum class TagKinds : std::uint8_t { Writes = 1, Reads = 2, Both = 3 };

// A registered pool: a held thing, ended by close(reason) or by dropping it. Move-only.
class [[nodiscard("dropping it revokes the remote access at once")]] MEMWIRE_API Pool {
 public:
  Pool(Pool &&) noexcept;
  Pool& operator=(Pool&&) noexcept;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool();

  // The metadata with the pool's shared token: every holder is admitted alike, and names
  // itself (Notification::peer is then unauthenticated).
  PoolMetadata metadata() const;
  // The metadata with a token of `peer`'s own (the same token while the grant lives): its
  // transfers' notifications carry `peer`, authenticated, and revoke(peer) ends its access
  // alone. `peer`: 1 to kMaxTagBytes bytes, no NUL; else Error{InvalidArgument}.
  PoolMetadata metadata_for(std::string_view peer);
  // Ends `peer`'s grant: its token is refused from now on, and its transfers open on the stream
  // transports deliver no tag. False when it had none.
  bool revoke(std::string_view peer);
  // Request-scoped access (a lease): `peer` may move `blocks` of this pool, with `access`, for
  // request `request`, for `lease` from now, through the returned grant's metadata and nothing
  // else; see BlockGrant. Notifications of its transfers carry `peer` (authenticated) and
  // `request`. Throws Error{InvalidArgument} for a bad peer or request name (1 to
  // kMaxTagBytes bytes, no NUL), no blocks, a block past the last, lease <= 0, a max_lease
  // below the lease, or more than PoolOptions::max_request_grants grants live;
  // Error{Cancelled} once closed. `max_lease`: how far from now BlockGrant::renew may carry
  // the lease (0: no further than `lease`), the bound a peer's heartbeats never pass.
  BlockGrant grant(std::string_view peer, std::string_view request,
                   const std::vector<std::uint64_t>& blocks, Access access,
                   std::chrono::milliseconds lease,
                   std::chrono::milliseconds max_lease = std::chrono::milliseconds(0));
  // Frames naming this pool that peers sent against the protocol (a tag with no admitted
  // transfer, a second tag for one, a PoolEnd presenting another token or pool, a malformed
  // request: no or too many pieces, pieces that do not add up, a tag too long or holding a NUL,
  // an end of transfer on a read or an untagged write, a request after its transfer's end; a
  // text too long, a frame of another version or an unknown type, an answer sent to the owner;
  // over verbs a PoolDone without keys or not its PoolBegin's): each was refused and, on tcp
  // and shm, its connection closed.
  std::uint64_t peer_faults() const;
  // Well-formed requests refused for what they asked (AccessDenied: blocks outside a grant's, an
  // access the pool or the grant does not allow, a wrong token), before any byte moved. Not
  // faults: the connection stays. A grant's peer checks its own requests first (RequestScope).
  std::uint64_t refusals() const;
  std::uint64_t block_count() const;
  // Where block `index` lives here.
  void* block(std::uint64_t index) const;

  // The next notification in arrival order. Throws Error{Timeout}, Error{PeerLost} when an
  // admitted tagged transfer failed or its peer was lost in the middle of it (once per
  // transfer, naming its tag), Error{Cancelled} once the pool is closed.
  Notification next_notification(std::chrono::milliseconds timeout);
  // Waits for a notification with this tag (others stay queued), from `from` when not empty,
  // of a transfer of `kinds` (writes alone by default). Throws like next_notification when such
  // a transfer with that tag failed; another's failure (a read's, for a wait for writes) ends
  // no wait. Tags left queued count against their sender's share (PoolOptions): a granted
  // peer's never block another peer's, and shared-token peers' never block a granted one's.
  Notification wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                            std::string_view from = {}, TagKinds kinds = TagKinds::Writes);
  // For event loops: the same two without waiting, empty when nothing fits yet; they throw as
  // the waits do (PeerLost for a failed transfer, Cancelled once closed).
  std::optional<Notification> try_next_notification();
  std::optional<Notification> try_wait_for_tag(std::string_view tag, std::string_view from = {},
                                               TagKinds kinds = TagKinds::Writes);
  // An eventfd that is readable whenever notifications arrived (or the pool closed) since it
  // was last read: watch it (epoll, asyncio's add_reader), read its 8 bytes, then try_... until
  // they come back empty. Owned by the pool; valid until the pool is closed or dropped.
  int notification_fd();
  // From now on each notification goes to `callback` instead of the queue (queued ones first),
  // on memwire's I/O thread: keep it short and never block in it. Failures come with `error`.
  // An empty callback queues them again. max_queued_notifications is the queue's: a callback
  // that keeps its own queue bounds it itself, by throwing memwire::Error for a tag it cannot
  // take (the sender's transfer then fails with that error).
  void on_notification(std::function<void(const Notification&)> callback);
  // Notifications queued now.
  std::size_t queued_notifications() const;

  // Ends it: revokes remote access at once, fails the transfers that use it as their local
  // side (and waits until none touches its memory), and ends every wait, now and later, with
  // Error{Cancelled} carrying `reason` when given. Idempotent; dropping the pool does the same.
  // Safe while other threads wait on this pool; not while another thread moves or destroys it.
  void close(std::string_view reason = {});

 private:
  friend class Connector;
  friend class LayerReceiver;
  explicit Pool(std::shared_ptr<detail::Registration> registration);
  detail::Registration& registration() const;
  detail::PoolState& waitable() const;
  std::shared_ptr<detail::Registration> registration_;
};

// Active: one transfer of blocks between a local and a remote pool, with the operations'
// status, waiting, cancelling and callbacks. cancel(reason) tells the owner why: its waits for
// this transfer's tag end with Error{Cancelled} carrying `reason` (tcp, shm; verbs carries the
// code alone).
class [[nodiscard("dropping it cancels the transfer")]] MEMWIRE_API BlockTransfer
    : public Operation {
 private:
  friend class Connector;
  friend class LayerSender;  // hears why a layer failed, on the I/O thread
  using Operation::Operation;
};

}  // namespace memwire
