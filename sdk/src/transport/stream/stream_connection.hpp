#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/access_gate.hpp"
#include "core/operation_core.hpp"
#include "memwire/error.hpp"
#include "telemetry/connection_watch.hpp"
#include "transport/stream/event_loop.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"

namespace memwire::detail {

class StreamConnection;

// A callable run at most once that may own what cannot be copied (pins).
class OnceTask {
 public:
  OnceTask() = default;
  template <class F>
  OnceTask(F f) : call_(std::make_unique<Holder<F>>(std::move(f))) {}  // NOLINT: implicit
  explicit operator bool() const noexcept { return call_ != nullptr; }
  void operator()() {
    auto call = std::move(call_);
    if (call) call->run();
  }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct Holder final : Base {
    explicit Holder(F f) : f(std::move(f)) {}
    void run() override { f(); }
    F f;
  };
  std::unique_ptr<Base> call_;
};

// What one side of the protocol does with incoming frames (the passive server or the active
// client). Runs on the connection's event loop thread.
class FrameHandler {
 public:
  virtual ~FrameHandler() = default;
  // The header and the frame's inline payload (texts, piece lists, a mapped location: see
  // inline_payload_bytes) have arrived; take the latter with receive()/receive_text(). A frame
  // whose payload streams (a write's bytes, a read answer's) hands it to receive_into() or
  // discard(): the next frame is read once it has all landed.
  virtual void on_frame(StreamConnection& connection, const FrameHeader& header) = 0;
  virtual void on_closed(StreamConnection& connection, const Error& reason) = 0;
  // A memwire frame the connection refused before on_frame (another version, an unknown type):
  // it closes; the passive side counts it against the pool it names.
  virtual void on_malformed(const FrameHeader& /*header*/) {}
  // Whether work that this connection will carry more frames of is in progress (a transfer
  // whose completion notice may still come here): an idle limit must not close it then.
  virtual bool busy() const { return false; }
  // Whether answers to more than one request sent here are still due: the loop will soon be
  // back on this connection, and a small frame may wait for it to go out with others. Any
  // thread.
  virtual bool answers_due() const { return false; }
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
  // A pool request's transfer (kept alive by keep_alive): should its bytes not go, the PoolEnd
  // that goes instead carries its failure.
  const OperationCore* operation = nullptr;
  // A descriptor that goes with the frame's first byte (SCM_RIGHTS; Unix sockets only): a
  // mapped answer's memfd. Such a frame is never held back nor sent behind another in one call.
  FileDescriptor passed;
  // Runs once the last byte is out (after the pin is let go), on the thread that sent it.
  OnceTask on_sent;
  // Runs instead when the frame is dropped with its connection.
  OnceTask on_dropped;
  // Sent by the loop, never on the sender's thread: its caller goes on at once while the
  // socket copies the payload (a pool write's blocks; see StreamTransfer::bytes_by_loop).
  bool by_loop = false;
  std::size_t sent = 0;   // bytes of header and payload already out
  bool finished = false;  // every byte is out
  OutFrame() = default;
  OutFrame(OutFrame&&) = default;
  OutFrame& operator=(OutFrame&&) = default;
  ~OutFrame() {
    if (finished || !on_dropped) return;
    pin.reset();  // first: what on_dropped does may wait for this very pin
    on_dropped();
  }
};

// One stream connection, driven by an event loop (edge-triggered epoll): no thread of its own.
// Reading is the loop's: small frames arrive many per recv through an inbox; a frame's streamed
// payload goes from the socket straight into registered memory (or is skipped). Writing: a
// frame sent while nothing is queued goes out at once on the sender's thread, as far as the
// socket takes it without blocking (unless marked by_loop: a pool write's bytes, which its
// caller must not copy); the rest is queued and the loop sends it as the socket drains.
// Answers the loop writes while more requests wait in the inbox go out together.
//
// A thread waiting for the answer to a request it sent here may read in the loop's place
// (drive()): the reading state below is then its own until it lets go. The loop never waits for
// it: an edge it gets meanwhile is noted, and handed back to it when the waiter lets go.
class StreamConnection : public std::enable_shared_from_this<StreamConnection>, public WaitDriver {
 public:
  StreamConnection(FileDescriptor socket, std::unique_ptr<FrameHandler> handler, std::string peer,
                   EventLoop& loop);
  ~StreamConnection();
  StreamConnection(const StreamConnection&) = delete;
  StreamConnection& operator=(const StreamConnection&) = delete;

  // Joins the loop, once the owner holds the connection (a shared_ptr), not in the constructor.
  // `first_frame_timeout` (non-zero): the peer must send its first frame within it, or the
  // connection closes. `on_finished` runs on the loop once the connection has closed and its
  // handler heard of it (it must not drop the connection).
  void run(std::chrono::milliseconds first_frame_timeout = {},
           std::function<void()> on_finished = {});

  // Counts this connection open until it closes, and logs how it ended. Before run().
  void watch(std::unique_ptr<ConnectionWatch> watch) { watch_ = std::move(watch); }
  // A serving side's bound on what its answers may hold queued for a peer that reads them
  // slowly (or never): over `bytes`, no more requests are read until the peer has taken
  // enough. 0 = unbounded: an active side must never stop reading answers, or two connectors
  // sending to each other could each wait on the other. Before run().
  void limit_queued_bytes(std::size_t bytes) { max_queued_bytes_ = bytes; }
  // A serving side's bound on silence after the first frame: a peer that sends nothing for
  // `timeout` while nothing is in progress (no answer being sent, the handler not busy) is
  // closed. 0 = none. Before run().
  void limit_idle(std::chrono::milliseconds timeout) { idle_timeout_ = timeout; }
  // Since the last frame sent or received, or the last mark_in_use().
  std::chrono::steady_clock::duration idle_for() const noexcept;
  // A serving side, after a peer's small request: the loop polls a while before it sleeps
  // (EventLoop::poll_a_while) when that request was the only frame of its read, a peer that
  // waits for each answer before it asks again. Frames read together are a peer that keeps
  // many in flight: polling then takes a CPU from it (64 x 4 KiB in flight, 0.79-0.82x).
  void poll_after_a_lone_request() noexcept { poll_wanted_ = true; }
  // Handed to a transfer that is about to send on it: not idle.
  void mark_in_use() noexcept { note_activity(); }
  // Why the connection closed ("" while open).
  std::string close_reason() const;

  // Queues a frame; false when the connection is closed (the frame is dropped).
  bool send(OutFrame frame);
  // In on_frame: the frame's inline payload bytes, in turn. False when the frame did not carry
  // that many (the connection is closing then).
  bool receive(void* data, std::size_t length);
  // Receives a short text payload (names, error messages); closes on an oversized one.
  std::optional<std::string> receive_text(std::uint64_t length);
  // In on_frame of a frame that says it carries a descriptor: the next one received (they
  // arrive with their frame's first byte, in order); empty when none came.
  FileDescriptor take_passed();
  // Descriptors received that wait for their frames' handlers, at most: more is a protocol
  // error. (How many a connection keeps is its handler's to bound: shm's PeerMappings, 64.)
  static constexpr std::size_t kMostPassedWaiting = 4;
  // In on_frame: the frame's streamed payload fills `pieces`, then `then` runs on the loop.
  // If the connection breaks first, `then` is dropped uncalled (with what it holds).
  // `pin`, when given, keeps the memory of `pieces` alive (a caller's buffer) and `gate` is
  // whose: should it close before the payload has landed, the rest is discarded at once and
  // the pin let go, so the closer waits for no peer (see divert_sink).
  void receive_into(std::vector<iovec> pieces, OnceTask then,
                    std::optional<AccessGate::Pin> pin = std::nullopt, AccessGate* gate = nullptr);
  // The same, skipping `length` bytes.
  void discard(std::uint64_t length, OnceTask then);

  // Breaks the connection at once: queued frames are dropped, the loop closes it.
  void shutdown(const std::string& reason);
  // Closes once every queued frame is out (acknowledgements of a process about to exit),
  // or after `timeout` at the latest.
  void close_when_sent(std::chrono::milliseconds timeout);
  bool alive() const;
  // Closed, and its handler told: dropping the last reference now releases everything.
  bool finished() const noexcept { return finished_.load(); }
  // Shuts down and waits until the loop has closed it. Never on its loop thread.
  void join();
  const std::string& peer() const noexcept { return peer_; }
  // Closed because memory this side was sending from became unreadable.
  bool closed_on_local_memory_fault() const noexcept { return local_memory_fault_.load(); }
  // Why a send failed: "send failed", or what the local memory fault was.
  std::string send_failure() const;
  FrameHandler& handler() noexcept { return *handler_; }
  // Over a Unix socket whose reads pass credentials (pass_credentials): the process that sent
  // every byte read so far, as the kernel records it (0: none said; -1: more than one did).
  // The loop's, or the reading's holder's.
  int sender_process() const noexcept { return other_sender_ ? -1 : first_sender_; }
  // Reads bring no credentials from now on (what is said was said: sender_process() stays).
  void stop_reading_credentials();

  // The waiter's reading (see WaitDriver): only the frames that answer `request` are handled on
  // its thread, so a completion it runs is its own operation's; it stops at any other frame and
  // leaves that to the loop. Not on a serving connection (its limits are the loop's). Not on its
  // loop thread.
  bool drive(std::uint64_t request, const std::atomic<bool>& settled,
             std::chrono::steady_clock::time_point spin_until,
             std::chrono::steady_clock::time_point until) override;

 private:
  // The loop's side.
  void on_events(std::uint32_t events);
  // Runs `read` on the loop with the reading taken, unless a waiter has it: then `missed` is
  // noted for it to hand back when it lets go (resume_on_loop).
  template <class Read>
  void with_reading_on_loop(std::uint32_t missed, Read read);
  // What a waiter left for the loop: edges it missed, a close, a failed send's reading.
  void resume_on_loop(std::uint32_t missed);
  // The waiter's: lets go of the reading, handing what it leaves back to the loop.
  void let_go_of_reading();
  // Whether the socket has something to read (or an end) right now.
  bool readable_now() const;
  // A waiter reading stops the loop from being woken by the same bytes (EPOLLIN not watched).
  void set_interest();
  // What send_failed() does on the loop, once it has the reading.
  void read_after_send_failure();
  void read_frames();
  enum class Refill { Got, Again, Closed };
  // Reads at most `most` bytes more into the inbox.
  Refill refill_inbox(std::size_t most = kInboxSize);
  // Fills the active sink from the inbox, then the socket; true once it is full (its
  // continuation has run).
  bool fill_sink();
  void close_on_loop();
  void close_with_reading();  // close_on_loop(), the reading taken
  void flush();
  // Sends what is left of `frame` without blocking: false when the connection broke.
  bool write_some(OutFrame& frame);
  // The same for many frames in one sendmsg; `whole`: how many of them went out entirely.
  bool write_together(std::span<OutFrame> frames, std::size_t& whole);
  // Of `frames`, `lengths` bytes left to send each, `sent` went out (in order): advances them,
  // marks (and unpins) those that went out whole, and returns how many did.
  static std::size_t account_sent(std::span<OutFrame> frames, std::span<const std::size_t> lengths,
                                  long sent);
  // A send failed: the connection closes once the loop has read what the peer sent before it
  // went (a refusal stays readable after the reset that failed the send, and says why).
  // `why` is the reason then, unless what the loop read gave a better one.
  void send_failed(const std::string& why);
  std::atomic<bool> send_failed_{false};
  std::string send_failed_why_;  // mutex_ held
  // The memory a frame was sent from could not be read (EFAULT: a served file truncated or
  // unmapped under it): this side's fault, not the peer's.
  std::atomic<bool> local_memory_fault_{false};
  std::size_t frame_parts(OutFrame& frame, std::vector<iovec>& parts);
  // The descriptor to send with what is left of `frame`: only before its first byte.
  static int passed_with(const OutFrame& frame) {
    return frame.sent == 0 && frame.passed ? frame.passed.get() : -1;
  }
  void schedule_flush();  // mutex_ held
  // Queues `frame` behind (or ahead of) the others, counting what it costs. mutex_ held.
  void enqueue(OutFrame frame, bool at_front = false);
  // What a queued frame holds of this process's memory (its registered bytes are not copied).
  static std::size_t queued_cost(const OutFrame& frame);
  // The loop's: whether the answers queued leave room to read another request.
  bool room_for_requests();
  void watch_idleness();
  void note_activity() noexcept {
    last_activity_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                         std::memory_order_relaxed);
  }
  // Loop thread, reading this connection: small answers are held back while more requests
  // wait in the inbox, then go out together in one sendmsg.
  bool hold_back(OutFrame& frame);
  void send_held_back();
  std::size_t buffered() const noexcept { return inbox_end_ - inbox_begin_; }
  std::size_t take_from_inbox(void* data, std::size_t length);

  FileDescriptor socket_;
  std::unique_ptr<FrameHandler> handler_;
  const std::string peer_;
  bool poll_wanted_ = false;  // loop thread (read_frames)
  EventLoop& loop_;

  mutable std::mutex mutex_;
  std::deque<OutFrame> queue_;
  std::atomic<std::size_t> queued_bytes_{0};  // queued_cost() of what queue_ holds; mutex_ held
  std::size_t max_queued_bytes_ = 0;
  std::chrono::milliseconds idle_timeout_{};
  std::atomic<std::chrono::steady_clock::rep> last_activity_{
      std::chrono::steady_clock::now().time_since_epoch().count()};
  bool closing_ = false;
  bool draining_ = false;
  bool writing_ = false;  // a thread is writing a frame taken from the queue (or inline)
  bool flush_scheduled_ = false;
  std::condition_variable drained_;
  std::string close_reason_;

  std::function<void()> on_finished_;
  std::unique_ptr<ConnectionWatch> watch_;
  std::atomic<bool> finished_{false};
  std::condition_variable finished_changed_;
  bool running_ = false;

  // Who reads: kReading while the loop or a waiter does; the loop, finding a waiter there, adds
  // what it missed (its edge's events, kMissedClose, kMissedSendFailure) for it to hand back.
  std::atomic<std::uint32_t> reader_{0};
  static constexpr std::uint32_t kReading = 1u << 24;
  static constexpr std::uint32_t kMissedClose = 1u << 25;
  static constexpr std::uint32_t kMissedSendFailure = 1u << 26;
  // EPOLLIN, what the socket watches; without it while a waiter reads. interest_mutex_ held.
  std::mutex interest_mutex_;
  bool reading_away_ = false;
  bool watching_writable_ = false;  // written by the loop only, under interest_mutex_

  // The loop's own state, touched by no other thread.
  bool closed_on_loop_ = false;
  bool loop_reads_ = false;  // the loop has the reading (with_reading_on_loop)
  bool awaiting_first_frame_ = false;
  EventLoop::TimerId first_frame_timer_ = 0;
  EventLoop::TimerId drain_timer_ = 0;
  EventLoop::TimerId idle_timer_ = 0;
  bool paused_for_room_ = false;  // reading stopped until the queued answers drain
  // EPOLLOUT is watched only while frames wait for room in the socket: watched always, every
  // byte the peer read raised an edge, a wake-up of this loop per request or answer for
  // nothing (2 per small READ on the serving side, perf trace).
  void watch_writable(bool watch);

  // The reading state: the loop's, or the waiter's that has the reading (reader_).
  static constexpr std::size_t kInboxSize = 64 * 1024;
  static constexpr std::size_t kDirectReceive = 16 * 1024;
  std::unique_ptr<std::byte[]> inbox_;
  std::size_t inbox_begin_ = 0;
  std::size_t inbox_end_ = 0;
  std::size_t inline_left_ = 0;  // of the frame being handled: inline bytes not yet taken
  // Descriptors received and not yet taken by their frame's handler, and how many came in all
  // (a read that brought one may have stopped short of what follows).
  std::deque<FileDescriptor> passed_;
  std::size_t passed_count_ = 0;
  // The credentials reads brought (sender_process()).
  int first_sender_ = 0;
  bool sender_said_ = false;
  bool other_sender_ = false;
  // Takes the descriptors a recvmsg brought: false (the connection shut down) when they are
  // more than may come, or something else came.
  bool take_control(msghdr& message);
  // The last frame's payload, larger than the inbox, went straight to memory: the next refill
  // at a frame boundary reads its header alone (read_frames).
  bool header_alone_ = false;
  struct Sink {
    std::vector<iovec> pieces;  // empty: discarding
    std::uint64_t left = 0;
    OnceTask then;
    std::optional<AccessGate::Pin> pin;  // of the memory `pieces` name
    AccessGate* gate = nullptr;          // the pin's, whose close diverts the rest
  };
  // Any thread: the memory's gate is closing: the rest of the payload is discarded, the pin
  // let go. Takes sink_mutex_, which the reader holds while it writes into the memory.
  void divert_sink();
  // The reader's: the connection closes with a payload under way. What the sink holds goes
  // outside sink_mutex_ (dropping `then` may fail a transfer, whose closing gate diverts).
  void drop_sink();
  // Whose sink_ the reader (loop or waiter) owns; sink_mutex_ guards its memory and pin against
  // divert_sink() on another thread.
  std::optional<Sink> sink_;
  std::mutex sink_mutex_;
  std::atomic<bool> broken_{false};  // mirrors closing_ for the loop, without the lock
  // False once a read came back short: the socket was empty then, and whatever arrives later
  // raises a new edge. Saves the recv that would only say EAGAIN.
  bool maybe_more_ = true;
  bool peer_ending_ = false;  // an edge said the peer closed or broke its end
  static constexpr std::size_t kMostHeldBack = 64;
  static constexpr std::size_t kMostCopiedWhenHeld = 16 * 1024;
  std::vector<OutFrame> held_back_;
  // While a waiter reads: the request whose answer it waits for (0: the loop reads), and
  // whether it stopped at a frame for another.
  std::uint64_t driven_request_ = 0;
  bool stopped_at_other_ = false;
  // The connection whose frames the loop on this thread is reading right now, if any.
  static thread_local const StreamConnection* reading_connection_;
};

// Runs `read` with the reading held by this (loop) thread; when a waiter has it, records `missed`
// for the waiter to hand back instead (see drive()).
template <class Read>
void StreamConnection::with_reading_on_loop(std::uint32_t missed, Read read) {
  if (loop_reads_) return read();
  auto state = reader_.load(std::memory_order_acquire);
  for (;;) {
    if (state & kReading) {
      if (reader_.compare_exchange_weak(state, state | missed, std::memory_order_acq_rel)) return;
    } else if (reader_.compare_exchange_weak(state, kReading, std::memory_order_acq_rel)) {
      break;
    }
  }
  loop_reads_ = true;
  read();
  loop_reads_ = false;
  reader_.store(0, std::memory_order_release);
}

}  // namespace memwire::detail
