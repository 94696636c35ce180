#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "transport/verbs/access_grant.hpp"
#include "transport/verbs/outbound_transfer.hpp"
#include "transport/verbs/verbs_device.hpp"
#include "transport/verbs/verbs_handles.hpp"
#include "transport/verbs/verbs_wire.hpp"
#include "util/ids.hpp"

namespace memwire::detail {
class Registration;
}

namespace memwire::detail::verbs {

// One RC queue pair to a peer connector, shared by every operation between the two: its own
// CQ on the transport's completion channel, a ring of receive buffers for notices, a pool of
// send buffers, and send-queue credits so that posting never overflows the queue. Used under
// the engine's work only (its progress thread, or a caller or waiter that took it).
class Connection {
 public:
  enum class State { Resolving, Connecting, Established, Closed };
  enum class Tag : std::uint64_t { Receive = 1, Control = 2, Data = 3, Bind = 4 };
  static std::uint64_t wr_id(Tag tag, std::uint64_t value) {
    return (static_cast<std::uint64_t>(tag) << 56) | value;
  }
  static Tag tag_of(std::uint64_t id) { return static_cast<Tag>(id >> 56); }
  static std::uint64_t value_of(std::uint64_t id) { return id & ((std::uint64_t{1} << 56) - 1); }

  // `device` null: a connection with no QP, only an identity for tests of the protocol's sides.
  Connection(std::shared_ptr<const VerbsDevice> device, ibv_comp_channel* channel, CmId id,
             bool outgoing, std::string peer, std::string address);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Before create_queue_pair(): the QP gets a protection domain of its own, which no other
  // QP shares (access granted to its peer on devices without type-2 windows).
  void use_own_protection_domain();
  const std::shared_ptr<ibv_pd>& own_protection_domain() const noexcept { return own_pd_; }
  // Creates the CQ and the QP on the id (once its address is resolved, or on a connect
  // request) and posts every receive buffer. Throws Error{Transport}.
  void create_queue_pair();

  rdma_cm_id* id() const noexcept { return id_.get(); }
  ibv_cq* cq() const noexcept { return cq_.get(); }
  bool has_queue_pair() const noexcept { return id_ && id_->qp != nullptr; }

  // Sends `notice` at once, or when the QP is established and a send buffer and a credit are
  // free. False when posting failed: the connection is broken.
  bool send(const Notice& notice);
  // Hands `grant` to the peer for its transfer `seq`: binds its windows on this QP, then its
  // keys (Keys notices), then Accept. Should the grant end before Accept is posted, the
  // Accept says so instead. False when posting failed.
  // `bind`: false when the grant's windows are bound on this QP already (a pool's next transfer).
  bool send_grant(std::uint64_t seq, const std::shared_ptr<AccessGrant>& grant, bool bind = true);
  // The QP can send now: flushes what waited. False on a post failure.
  bool establish();
  // Stops the connection for good: disconnects and destroys the QP, after which the device no
  // longer touches any memory on its behalf.
  void close();

  // Notices queued or posted but not yet acknowledged by the peer's device.
  bool notices_pending() const noexcept;

  // Send-queue slots data work requests may use now (some stay reserved for notices).
  unsigned data_credits() const noexcept;
  // Posts a chain of `count` work requests whose last one is signalled. False on failure.
  bool post_data(ibv_send_wr* first, unsigned count);
  // A successful signalled send completion: returns its credits; a control send also frees
  // its buffer and lets a waiting notice go. False when that post failed.
  bool on_send_completion(std::uint64_t id);
  // The bytes of a completed receive; valid until repost_receive().
  std::span<const std::byte> received(std::uint64_t id, std::uint32_t length) const;
  // Posts a consumed receive again; the peer gets its credit back with the next notice.
  bool repost_receive(std::uint64_t id);
  // The credits a received notice returned: notices that waited for them go. False on a post
  // failure.
  bool on_credits(std::uint16_t returned);
  // Once a received notice is handled: credits due to the peer go on their own if no notice
  // queued will carry them. False on a post failure.
  bool return_credits();

  // Book-keeping of the transport (under the engine's work).
  const std::uint64_t serial = next_serial();  // never reused: what a one-shot claim holds
  State state = State::Resolving;
  const bool outgoing;
  std::string peer;           // the peer connector's name, as it said in its hello
  const std::string address;  // "ip:port" dialled (outgoing only)
  std::size_t rail = 0;       // the engine's rail (local device) it runs on
  std::chrono::steady_clock::time_point deadline{};
  std::map<std::uint64_t, OutboundTransfer> outbound;  // active transfers, by seq
  std::deque<std::uint64_t> ready;                     // seqs with data left to post
  // Completions polled by a caller that began a transfer and left for the engine's next drain.
  std::deque<ibv_wc> unhandled;
  // Registrations a peer began here, with the access granted to this connection for each.
  struct Inbound {
    std::weak_ptr<Registration> registration;
    std::shared_ptr<AccessGrant> grant;
    // A pool: its grant stays for the connection's life; its transfers under way (Begin
    // without Done or Abort yet), by seq, with their tags and whom the token said sent them.
    struct PoolTransfer {
      std::string tag;
      std::string peer;
      bool authenticated = false;
      std::string request;  // under a request grant's token
      std::string token;    // the one it presented, in hex (Notification::token)
      OperationKind kind = OperationKind::Write;
    };
    std::map<std::uint64_t, PoolTransfer> pool_transfers;
  };
  std::map<Id128, Inbound> inbound;
  // When the owner last ended a grant of this connection (its operation revoked): an access
  // error just after is a reader that was in flight, not a fault of the peer.
  std::chrono::steady_clock::time_point grant_ended_at{};
  // Active side: the keys of pools the owner granted this connection, by pool key. Its later
  // transfers of the pool move at once, one-sided; they die with the connection.
  std::map<Id128, std::vector<std::uint32_t>> pool_keys;

 private:
  static std::uint64_t next_serial() noexcept;
  struct Waiting;
  bool post_receive(std::uint64_t id);
  // Fill `wr` with the next bind of `message` (false: none to post) or with its notice, and
  // count them as posted; post_chain() posts them together.
  bool prepare_bind(Waiting& message, ibv_send_wr& wr);
  void prepare_control(const Waiting& message, ibv_send_wr& wr, ibv_sge& sge);
  bool post_chain(ibv_send_wr* chain, unsigned count);
  bool flush();

  struct Signalled {
    std::uint64_t id;
    unsigned work_requests;
  };

  std::shared_ptr<ibv_pd> own_pd_;  // first: outlives the QP and regions made in it
  std::shared_ptr<const VerbsDevice> device_;
  ibv_comp_channel* channel_;
  unsigned send_depth_;
  unsigned reserved_;  // credits kept for notices; also the number of send buffers
  unsigned credits_;
  unsigned peer_receives_ = kNoticeReceives;  // the peer's receives this side may still use
  unsigned credits_due_ = 0;                  // receives posted again, not yet told the peer
  std::unique_ptr<std::byte[]> buffers_;
  Mr buffers_mr_;
  Cq cq_;
  CmId id_;
  std::deque<std::uint64_t> free_send_slots_;
  std::deque<Signalled> in_flight_;
  // A notice to post, or the binds of a grant's windows (`window`: the next to bind). An
  // Accept carries its grant: posted as a refusal if the grant ended before it left.
  struct Waiting {
    std::array<std::byte, kNoticeBytes> bytes;
    std::size_t size = 0;
    std::shared_ptr<AccessGrant> grant;
    std::size_t window = 0;
    bool bind = false;
    bool credits_only = false;
    std::uint64_t seq = 0;
  };
  std::deque<Waiting> waiting_;
  std::map<std::uint64_t, std::shared_ptr<AccessGrant>> binding_;  // binds in flight, by wr_id
  std::uint64_t next_bind_ = 0;
};

// "peer NAME at ip:port", for errors and logs.
std::string describe(const Connection& connection);

}  // namespace memwire::detail::verbs
