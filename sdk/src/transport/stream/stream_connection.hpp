#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "access_gate.hpp"
#include "memwire/error.hpp"
#include "memwire/export.hpp"  // MEMWIRE_API: exported for tests, fuzzers and bench
#include "telemetry/connection_watch.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"

namespace memwire::detail {

class StreamConnection;

// What one side of the protocol does with incoming frames (the passive server or the active
// client). Runs on the connection's reader thread.
class FrameHandler {
 public:
  virtual ~FrameHandler() = default;
  // May consume the frame's payload with receive()/discard(); must consume all of it.
  virtual void on_frame(StreamConnection& connection, const FrameHeader& header) = 0;
  virtual void on_closed(StreamConnection& connection, const Error& reason) = 0;
  // Whether work that this connection will carry more frames of is in progress (a transfer
  // whose completion notice may still come here): an idle limit must not close it then.
  // Reader thread.
  virtual bool busy() const { return false; }
};

// A frame to send: the header, then `text` (a name, an error, a piece list), then `data` or
// `pieces`. `data` and `pieces` point into registered memory guarded by `gate`: it is pinned right
// before it goes out (or comes pinned already), and if the gate has closed meanwhile the frame
// goes out as an empty Cancelled frame instead, so the peer's request accounting still balances.
struct OutFrame {
  FrameHeader header;
  std::string text;
  const std::byte* data = nullptr;
  // Or many blocks of registered memory, sent back to back (a piece request's bytes).
  std::vector<iovec> pieces;
  AccessGate* gate = nullptr;
  // Declared before `pin`, so destroyed after it: the pin must go before the gate it points into.
  std::shared_ptr<const void> keep_alive;  // owner of `gate` and `data`
  std::optional<AccessGate::Pin> pin;      // held from the first byte sent to the last
  std::size_t sent = 0;                    // bytes of header and payload already out
  bool finished = false;                   // every byte is out
};

// One stream connection with a reader thread (small frames arrive many per recv through an
// inbox; payloads from 16 KiB go straight from the socket into registered memory) and a writer
// thread (straight from registered memory into the socket). A frame sent while nothing is
// queued goes out at once on the sender's thread, as far as the socket takes it without
// blocking: small requests and answers skip the thread hand-off. Answers the reader thread
// writes while more requests wait in its inbox go out together, before it next waits.
class MEMWIRE_API StreamConnection {
 public:
  StreamConnection(FileDescriptor socket, std::unique_ptr<FrameHandler> handler, std::string peer);
  ~StreamConnection();  // shuts down and joins
  StreamConnection(const StreamConnection&) = delete;
  StreamConnection& operator=(const StreamConnection&) = delete;

  // Threads start here, once the owner holds the connection, not in the constructor.
  // `first_frame_timeout` (non-zero): the peer must send its first frame within it, or the
  // connection closes. `on_finished` runs on the last thread to end (it must not drop the
  // connection), so its owner may reclaim it at once.
  void run(std::chrono::milliseconds first_frame_timeout = {},
           std::function<void()> on_finished = {});

  // Counts this connection open until its reader ends, and logs how it ended. Before run().
  void watch(std::unique_ptr<ConnectionWatch> watch) { watch_ = std::move(watch); }
  // A serving side's bound on what its answers may hold queued for a peer that reads them
  // slowly (or never): over `bytes`, the reader stops taking requests until the writer has
  // sent enough. 0 = unbounded: an active side must never stop reading answers, or two
  // connectors sending to each other could each wait on the other. Before run().
  void limit_queued_bytes(std::size_t bytes) { max_queued_bytes_ = bytes; }
  // A serving side's bound on silence after the first frame: a peer that sends nothing for
  // `timeout` while nothing is in progress (no answer being sent, the handler not busy) is
  // closed. 0 = none. Before run().
  void limit_idle(std::chrono::milliseconds timeout) { idle_timeout_ = timeout; }
  // Since the last frame sent or received, or the last mark_in_use().
  std::chrono::steady_clock::duration idle_for() const noexcept;
  // Handed to a transfer that is about to send on it: not idle.
  void mark_in_use() noexcept { note_activity(); }
  // Why the connection closed ("" while open).
  std::string close_reason() const;

  // Queues a frame; false when the connection is closed (the frame is dropped).
  bool send(OutFrame frame);
  // Reader thread only: moves payload bytes into `data`, or skips them.
  bool receive(void* data, std::size_t length);
  // The same into many blocks in turn; `pieces` is used up as they fill.
  bool receive(std::span<iovec> pieces);
  bool discard(std::size_t length);
  // Receives a short text payload (names, error messages); closes on an oversized one.
  std::optional<std::string> receive_text(std::uint64_t length);

  // Breaks the connection at once: blocked reads and writes return, both threads end.
  void shutdown(const std::string& reason);
  // Closes once every queued frame is out (acknowledgements of a process about to exit),
  // or after `timeout` at the latest.
  void close_when_sent(std::chrono::milliseconds timeout);
  bool alive() const;
  // Both threads have left their loops: dropping the last reference now joins nothing that
  // could be the dropping thread itself.
  bool finished() const noexcept { return running_threads_.load() == 0; }
  // Shuts down and waits for both threads. Never from one of them.
  void join();
  const std::string& peer() const noexcept { return peer_; }
  FrameHandler& handler() noexcept { return *handler_; }

 private:
  void read_loop();
  void write_loop();
  // Sends what is left of `frame`; blocking, or only what the socket takes now. False when the
  // connection broke.
  bool write_frame(OutFrame& frame, bool blocking);
  // Pins `frame`'s memory (or turns it into a Cancelled frame) and appends the iovecs of what is
  // left of it to `parts`; the byte count.
  std::size_t frame_parts(OutFrame& frame, std::vector<iovec>& parts);
  // Reader thread: a small frame sent while more frames wait in the inbox is held back, then
  // goes out with the others in one sendmsg before the reader next waits on the socket.
  bool hold_back(OutFrame& frame);
  void send_held_back();
  // Reader thread: one recv into the inbox (it must be empty), as many bytes as have arrived.
  bool refill_inbox();
  // Copies what the inbox holds, up to `length`; the byte count.
  std::size_t take_from_inbox(void* data, std::size_t length);
  // Reader thread: waits while the queue holds more than max_queued_bytes_; false once closing.
  bool wait_for_room();
  // Queues `frame` behind (or ahead of) the others, counting what it costs. Under mutex_.
  void enqueue(OutFrame frame, bool at_front = false);
  // What a queued frame holds of this process's memory (its registered bytes are not copied).
  static std::size_t queued_cost(const OutFrame& frame);

  FileDescriptor socket_;
  std::unique_ptr<FrameHandler> handler_;
  const std::string peer_;

  mutable std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<OutFrame> queue_;
  std::size_t queued_bytes_ = 0;  // queued_cost() of what queue_ holds
  std::size_t max_queued_bytes_ = 0;
  std::condition_variable room_;  // queued_bytes_ fell to max_queued_bytes_, or closing
  bool closing_ = false;
  bool draining_ = false;
  bool writing_ = false;  // a sender's thread is writing a frame right now
  std::condition_variable drained_;
  std::string close_reason_;

  std::chrono::milliseconds first_frame_timeout_{};
  std::chrono::milliseconds idle_timeout_{};
  // Reader thread: past the first frame with an idle limit; a receive timed out while idle.
  bool idle_watched_ = false;
  bool idle_closed_ = false;
  std::atomic<std::chrono::steady_clock::rep> last_activity_{
      std::chrono::steady_clock::now().time_since_epoch().count()};
  void note_activity() noexcept {
    last_activity_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                         std::memory_order_relaxed);
  }
  std::function<void()> on_finished_;
  std::unique_ptr<ConnectionWatch> watch_;
  std::atomic<int> running_threads_{0};
  std::thread reader_;
  std::thread writer_;

  // Reader thread: bytes received ahead of the frame being read. One recv takes many small
  // frames (headers, short answers) at once; a payload at least kDirectReceive long goes from
  // the socket straight into its destination.
  static constexpr std::size_t kInboxSize = 64 * 1024;
  static constexpr std::size_t kDirectReceive = 16 * 1024;
  std::unique_ptr<std::byte[]> inbox_;
  std::size_t inbox_begin_ = 0;
  std::size_t inbox_end_ = 0;
  // Mirrors closing_ for the reader, which stops at once even with frames still in the inbox.
  std::atomic<bool> broken_{false};
  // Reader thread: answers held back while it handles the requests already in the inbox (one
  // sendmsg for a burst of them, not one each). Few, and each a header and one block.
  static constexpr std::size_t kMostHeldBack = 64;
  static constexpr std::size_t kMostCopiedWhenHeld = 16 * 1024;
  std::vector<OutFrame> held_back_;
};

}  // namespace memwire::detail
