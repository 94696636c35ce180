#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/active_transfer.hpp"
#include "transport/stream/same_host.hpp"
#include "transport/stream/stream_connection.hpp"

namespace memwire::detail {

// When a transfer between pools sends its tag: never (none), once every answer is in (a read:
// its bytes are here), right behind its requests (a write: the owner has the bytes before it
// reads the tag, and the tag's answer ends the transfer), or inside its only request (a write
// of one request: its answer says the tag was delivered).
enum class PoolNotice { None, AfterAnswers, Pipelined, InRequest };

// One active transfer spread over pooled connections: counts the chunks still out, then sends
// the completion notice on `notice_connection`.
class OutboundConnection;
struct StreamTransfer {
  std::shared_ptr<ActiveTransfer> transfer;
  std::weak_ptr<OutboundConnection> notice_connection;
  std::atomic<std::size_t> chunks_left{0};
  // One request carried the whole transfer (kCompletes): its answer completes it, no notice.
  bool single_request = false;
  // Some bytes moved through a mapping after the passive side answered: a notice must follow.
  std::atomic<bool> mapped{false};
  // A transfer between pools: its number on this connector, and when its tag goes.
  std::uint64_t pool_transfer_id = 0;
  PoolNotice pool_notice = PoolNotice::None;
  // A pool write whose bytes go through the socket: its frames, the notice too, are sent by
  // the loop (OutFrame::by_loop), so that write_blocks returns without copying them.
  bool bytes_by_loop = false;
};

// Makes `header` a pool frame of `type` (PoolFrameHeader) of transfer `pool_transfer_id`: what a
// request under a TransferHeader carries on the wire.
void mark_pool_frame(FrameHeader& header, FrameType type, std::uint64_t pool_transfer_id,
                     const TransferHeader& transfer);
// The completion notice of a transfer (a pool's is its PoolEnd), without code or request id.
OutFrame notice_frame(const ActiveTransfer& transfer, std::uint64_t pool_transfer_id);

// A read answer's bytes on their way into the caller's buffer (pinned meanwhile): if the
// connection breaks before they have all landed, the transfer fails with it.
class AnswerInFlight {
 public:
  AnswerInFlight(std::shared_ptr<StreamTransfer> transfer, std::string peer,
                 std::optional<AccessGate::Pin> pin)
      : transfer_(std::move(transfer)), peer_(std::move(peer)), pin_(std::move(pin)) {}
  AnswerInFlight(AnswerInFlight&& other) noexcept
      : transfer_(std::exchange(other.transfer_, nullptr)),
        peer_(std::move(other.peer_)),
        pin_(std::move(other.pin_)) {}
  AnswerInFlight& operator=(AnswerInFlight&&) = delete;
  ~AnswerInFlight();
  // Every byte landed: the pin goes, and the transfer is the caller's to carry on.
  std::shared_ptr<StreamTransfer> landed();

 private:
  std::shared_ptr<StreamTransfer> transfer_;
  std::string peer_;
  std::optional<AccessGate::Pin> pin_;
};

// The dialling end of a pooled connection: sends requests and matches responses to them.
class StreamActiveSide final : public FrameHandler {
 public:
  // `same_host`: shm's part, which copies where mapped answers say; null over tcp.
  explicit StreamActiveSide(std::unique_ptr<SameHostPeer> same_host = nullptr)
      : same_host_(std::move(same_host)) {}

  // Registers a request and returns its id (0 when the connection is closed); the caller sends
  // the frame. `destination`: where a read's payload lands from the socket. Cross-memory
  // requests pass `local`, the chunk of the caller's buffer, and a `pin` that keeps it alive
  // while the passive side copies into or out of it, or we copy through a mapping, until the
  // answer is handled.
  // A piece request's read names its `pieces` instead: the blocks its answer fills in turn. A
  // cross-memory piece request that asked for a mapping passes its blocks as `local_pieces`, in
  // the request's order.
  std::uint64_t expect(std::shared_ptr<StreamTransfer> transfer, std::byte* destination,
                       std::uint64_t length, std::optional<AccessGate::Pin> pin = std::nullopt,
                       std::byte* local = nullptr, std::vector<iovec> pieces = {},
                       std::vector<iovec> local_pieces = {});

  void on_frame(StreamConnection& connection, const FrameHeader& header) override;
  void on_closed(StreamConnection& connection, const Error& reason) override;
  // No request waits for an answer.
  bool idle() const;
  // Some request went out here: the owner no longer counts the connection Hello-only.
  bool carried_requests() const noexcept { return carried_.load(std::memory_order_relaxed); }
  bool answers_due() const override { return waiting_.load(std::memory_order_relaxed) > 1; }

 private:
  struct Pending {
    std::shared_ptr<StreamTransfer> transfer;
    std::byte* destination;  // where a read's payload lands; null for other requests
    std::uint64_t length;
    std::optional<AccessGate::Pin> pin;
    std::byte* local;           // cross-memory: the caller's chunk
    std::vector<iovec> pieces;  // a piece request's read: where its answer's bytes land
    std::vector<iovec>
        local_pieces;  // a cross-memory piece request's blocks, if it asked for a mapping
  };

  std::optional<Pending> take(std::uint64_t request_id);
  // Fails the transfer of a request taken from the table, after letting go of its pin.
  static void fail(Pending& pending, const Error& error);
  // The owner refused the connection (over its limits): every request fails with its reason.
  void refused(StreamConnection& connection, const FrameHeader& header);
  // Fails a request whose answer the connection lost halfway.
  static void lost_mid_answer(StreamConnection& connection, Pending& pending);
  // What in a successful answer its request did not ask for (a flag, another answer's type),
  // or nullopt: success must mean the bytes are here.
  static std::optional<std::string> unasked_in(const FrameHeader& header, const Pending& pending);
  // An answer whose request id waits for none: dropped if it may answer a failure notice, else
  // the connection breaks (its payload, maybe huge, is not read on).
  void unasked_answer(StreamConnection& connection, const FrameHeader& header);
  // The owner broke the protocol: the connection closes, and every request on it (`taken` too,
  // the one already out of the table) fails with a Protocol error that says how.
  void break_protocol(StreamConnection& connection, std::optional<Pending> taken,
                      const std::string& what);
  // No request is pending from now on: each fails with `why`, `taken` too.
  void fail_all(std::optional<Pending> taken, const Error& why);
  // The passive side answered with where its SharedBuffer holds the bytes: same_host_ copies
  // them here.
  void copy_mapped(StreamConnection& connection, const FrameHeader& header, Pending pending);
  // The same for a piece request's blocks, each where the answer says in the span it names.
  void copy_mapped_pieces(StreamConnection& connection, const FrameHeader& header, Pending pending);
  // The descriptor a mapped answer says it carries (nullopt: it says none; empty: it never came).
  static std::optional<FileDescriptor> take_passed(StreamConnection& connection,
                                                   const FrameHeader& header);
  // A mapped answer failed: a Protocol error breaks the connection, any other the transfer.
  void refuse_mapped(StreamConnection& connection, Pending pending, const Error& error);
  // The bytes moved through a mapping: the pin goes, and a notice will say so.
  void mapped_copy_done(StreamConnection& connection, Pending& pending);
  void chunk_done(StreamConnection& connection, const std::shared_ptr<StreamTransfer>& transfer);

  mutable std::mutex mutex_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::atomic<std::size_t> waiting_{0};  // pending_.size(), read without the lock
  std::atomic<bool> carried_{false};
  bool closed_ = false;
  // Reader thread only: copies through the owner's SharedBuffers it gave us (shm).
  const std::unique_ptr<SameHostPeer> same_host_;
};

// A connection this side dialled: a StreamConnection whose handler is its StreamActiveSide,
// which the pool reaches through active() (typed: the constructor made it).
class OutboundConnection final : public StreamConnection {
 public:
  // `same_host`: see StreamActiveSide. `direct_reads_from`: the owner's process when it lets us
  // read its pools' blocks ourselves (Dialled), else 0.
  OutboundConnection(FileDescriptor socket, std::unique_ptr<SameHostPeer> same_host,
                     std::string peer, EventLoop& loop, int direct_reads_from = 0)
      : OutboundConnection(std::move(socket), new StreamActiveSide(std::move(same_host)),
                           std::move(peer), loop, direct_reads_from) {}
  StreamActiveSide& active() noexcept { return active_; }
  std::chrono::steady_clock::duration age() const noexcept {
    return std::chrono::steady_clock::now() - dialled_at_;
  }
  // The process to read pool blocks from directly (process_vm_readv), or 0: ask the owner.
  int direct_reads_from() const noexcept {
    return direct_refused_.load(std::memory_order_relaxed) ? 0 : direct_reads_from_;
  }
  // The kernel refused a direct read (the owner made itself undumpable, say): ask from now on.
  void stop_direct_reads() noexcept { direct_refused_.store(true, std::memory_order_relaxed); }

 private:
  OutboundConnection(FileDescriptor socket, StreamActiveSide* active, std::string peer,
                     EventLoop& loop, int direct_reads_from)
      : StreamConnection(std::move(socket), std::unique_ptr<FrameHandler>(active), std::move(peer),
                         loop),
        active_(*active),
        direct_reads_from_(direct_reads_from) {}

  StreamActiveSide& active_;  // owned by the connection, as its handler
  const int direct_reads_from_;
  std::atomic<bool> direct_refused_{false};
  const std::chrono::steady_clock::time_point dialled_at_ = std::chrono::steady_clock::now();
};

// Sends the completion notice of `transfer` (all chunks moved) and expects its answer; fails
// the transfer when its connection is gone.
void send_completion_notice(const std::shared_ptr<StreamTransfer>& transfer);

}  // namespace memwire::detail
