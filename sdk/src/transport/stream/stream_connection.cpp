#include "transport/stream/stream_connection.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace memwire::detail {

StreamConnection::StreamConnection(FileDescriptor socket, std::unique_ptr<FrameHandler> handler,
                                   std::string peer, EventLoop& loop)
    : socket_(std::move(socket)),
      handler_(std::move(handler)),
      peer_(std::move(peer)),
      loop_(loop),
      inbox_(std::make_unique_for_overwrite<std::byte[]>(kInboxSize)) {
  tune_data_socket(socket_.get());
}

// The loop held a reference from run() until it closed the connection: nothing runs for it now.
StreamConnection::~StreamConnection() = default;

thread_local const StreamConnection* StreamConnection::reading_connection_ = nullptr;

void StreamConnection::run(std::chrono::milliseconds first_frame_timeout,
                           std::function<void()> on_finished) {
  on_finished_ = std::move(on_finished);
  awaiting_first_frame_ = first_frame_timeout.count() > 0;
  {
    std::lock_guard lock(mutex_);
    running_ = true;
  }
  auto self = shared_from_this();
  if (awaiting_first_frame_) {
    // A peer that connects and stays silent holds a descriptor: not for long.
    first_frame_timer_ = loop_.after(first_frame_timeout, [weak = weak_from_this()] {
      if (auto connection = weak.lock(); connection && connection->awaiting_first_frame_)
        connection->shutdown("no first frame within the handshake timeout");
    });
  }
  loop_.add(socket_.get(), EPOLLIN | EPOLLRDHUP,
            [self](std::uint32_t events) { self->on_events(events); });
}

void StreamConnection::watch_writable(bool watch) {
  // Every flush asks; it rarely changes. Only the loop writes the flag, so the loop may read it
  // without the lock, which a waiter's set_interest() needs only to read it too.
  if (closed_on_loop_ || watch == watching_writable_) return;
  std::lock_guard lock(interest_mutex_);
  watching_writable_ = watch;
  set_interest();
}

void StreamConnection::set_interest() {
  loop_.change_from_any_thread(socket_.get(), (reading_away_ ? 0u : EPOLLIN) | EPOLLRDHUP |
                                                  (watching_writable_ ? EPOLLOUT : 0u));
}

// ---- who reads --------------------------------------------------------------------------------

// While a waiter reads, the loop stops watching for bytes to read: the bytes the waiter takes
// would wake the loop too, for nothing, on a CPU the peer may need (a pair of epoll_ctl calls
// per wait instead). Watched again, an edge pending meanwhile is reported at once.
constexpr bool kLoopAsideWhileWaiterReads = true;

bool StreamConnection::drive(std::uint64_t request, const std::atomic<bool>& settled,
                             std::chrono::steady_clock::time_point spin_until,
                             std::chrono::steady_clock::time_point until) {
  // A serving connection's limits (room for answers, idleness, the first frame) are its loop's.
  if (request == 0 || broken_.load(std::memory_order_acquire) || max_queued_bytes_ != 0 ||
      idle_timeout_.count() != 0 || loop_.in_loop_thread())
    return false;
  std::uint32_t free = 0;
  if (!reader_.compare_exchange_strong(free, kReading, std::memory_order_acquire)) return false;
  // Not in the middle of another answer's payload, nor on a connection that is closing.
  if (sink_ || awaiting_first_frame_ || broken_.load(std::memory_order_acquire)) {
    let_go_of_reading();
    return false;
  }
  if (kLoopAsideWhileWaiterReads) {
    std::lock_guard lock(interest_mutex_);
    reading_away_ = true;
    set_interest();
  }
  driven_request_ = request;
  for (;;) {
    read_frames();
    if (settled.load(std::memory_order_acquire) || stopped_at_other_ ||
        broken_.load(std::memory_order_acquire))
      break;
    const auto now = std::chrono::steady_clock::now();
    const auto left = until - now;
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    if (now < spin_until) {  // a non-blocking recv again, rather than sleep in ppoll
      maybe_more_ = true;
      continue;
    }
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
    const timespec wait{
        static_cast<time_t>(seconds.count()),
        static_cast<long>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count())};
    pollfd watched{socket_.get(), POLLIN | POLLRDHUP, 0};
    const int ready = ::ppoll(&watched, 1, &wait, nullptr);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0) {
      if (watched.revents & POLLNVAL) break;
      maybe_more_ = true;
      if (watched.revents & (POLLRDHUP | POLLHUP | POLLERR)) peer_ending_ = true;
    }
  }
  driven_request_ = 0;
  let_go_of_reading();
  return true;
}

void StreamConnection::let_go_of_reading() {
  const bool broken = broken_.load(std::memory_order_acquire);
  bool hand_back = broken || stopped_at_other_;
  stopped_at_other_ = false;
  std::vector<OutFrame> dropped;  // outside the reading: their on_dropped may send or close
  if (broken) {
    // What close_on_loop() would let go of, now: a gate closing may be waiting for its pin.
    drop_sink();
    dropped = std::move(held_back_);
    held_back_.clear();
  }
  {
    // Watched again: an edge pending meanwhile is reported to the loop at once.
    std::lock_guard lock(interest_mutex_);
    if (reading_away_) {
      reading_away_ = false;
      set_interest();
    }
  }
  const auto missed = reader_.exchange(0, std::memory_order_acq_rel) & ~kReading;
  // An edge the loop missed may have been for bytes this thread read since: only what is
  // still there is handed back.
  if (missed != 0 && !hand_back)
    hand_back = (missed & (kMissedClose | kMissedSendFailure)) != 0 || readable_now();
  if (hand_back) loop_.post([self = shared_from_this(), missed] { self->resume_on_loop(missed); });
}

bool StreamConnection::readable_now() const {
  pollfd watched{socket_.get(), POLLIN | POLLRDHUP, 0};
  return ::poll(&watched, 1, 0) != 0;
}

void StreamConnection::resume_on_loop(std::uint32_t missed) {
  if (closed_on_loop_) return;
  if (broken_.load(std::memory_order_acquire)) return close_on_loop();
  if (missed & kMissedSendFailure) return read_after_send_failure();
  on_events(EPOLLIN | (missed & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)));
}

void StreamConnection::join() {
  shutdown("connection closed");
  std::unique_lock lock(mutex_);
  if (!running_ || loop_.in_loop_thread()) return;
  finished_changed_.wait(lock, [&] { return finished_.load(); });
}

bool StreamConnection::alive() const {
  std::lock_guard lock(mutex_);
  return !closing_;
}

void StreamConnection::shutdown(const std::string& reason) {
  // A handler that answers, then closes (a protocol error) meant the answer to go first.
  if (reading_connection_ == this) send_held_back();
  // On its loop, a half-filled payload lets go of its pin at once, closing already or not (a
  // gate closing on this thread may be waiting for it). Not the connection being read: the
  // loop closes that one once its handler returns.
  // A waiter reading it lets go of it itself, once it sees the connection closing.
  if (loop_.in_loop_thread() && reading_connection_ != this)
    with_reading_on_loop(kMissedClose, [&] { drop_sink(); });
  std::deque<OutFrame> dropped;
  {
    std::lock_guard lock(mutex_);
    if (closing_) return;
    closing_ = true;
    close_reason_ = reason;
    dropped.swap(queue_);
  }
  broken_.store(true, std::memory_order_release);
  ::shutdown(socket_.get(), SHUT_RDWR);
  queued_bytes_ = 0;
  drained_.notify_all();
  // Let go of their pins now: a gate closing on this very thread may be waiting for them.
  dropped.clear();
  if (auto self = weak_from_this().lock())
    loop_.post([self = std::move(self)] { self->close_on_loop(); });
}

void StreamConnection::close_when_sent(std::chrono::milliseconds timeout) {
  if (reading_connection_ == this) send_held_back();
  bool now = false;
  {
    std::lock_guard lock(mutex_);
    if (closing_) return;
    draining_ = true;
    now = queue_.empty() && !writing_;
    if (!now) schedule_flush();
  }
  if (now) return shutdown("connection closed");
  if (loop_.in_loop_thread()) {
    drain_timer_ = loop_.after(timeout, [weak = weak_from_this()] {
      if (auto connection = weak.lock()) connection->shutdown("connection closed");
    });
    return;
  }
  {
    std::unique_lock lock(mutex_);
    drained_.wait_for(lock, timeout, [&] { return closing_; });
  }
  shutdown("connection closed");
}

// ---- reading ---------------------------------------------------------------------------------

void StreamConnection::on_events(std::uint32_t events) {
  if (closed_on_loop_) return;
  // Writing is not reading: it never waits for a waiter that reads.
  if (events & EPOLLOUT) flush();
  const auto reading = events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (reading == 0 || closed_on_loop_) return;
  with_reading_on_loop(reading, [&] {
    maybe_more_ = true;
    // The peer's end came with this edge: a short read no longer means there is nothing more
    // to read (the end itself is read as 0 bytes, and no later edge will announce it).
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) peer_ending_ = true;
    read_frames();
  });
}

void StreamConnection::close_on_loop() {
  if (closed_on_loop_) return;
  auto self = shared_from_this();  // alive through remove(), which drops the loop's reference
  // A waiter reading hands the close back when it lets go: at once, the socket being shut.
  with_reading_on_loop(kMissedClose, [&] { close_with_reading(); });
}

void StreamConnection::close_with_reading() {
  if (closed_on_loop_) return;
  closed_on_loop_ = true;
  held_back_.clear();  // the connection is closing: they would not arrive
  drop_sink();
  passed_.clear();  // descriptors no frame took: closed now, not with the connection's last owner
  loop_.cancel(first_frame_timer_);
  loop_.cancel(drain_timer_);
  loop_.cancel(idle_timer_);
  shutdown("connection closed");  // a no-op when something else closed it first
  std::string why;
  {
    std::lock_guard lock(mutex_);
    why = close_reason_;
  }
  handler_->on_closed(*this, Error(ErrorCode::PeerLost, "connection to " + peer_ + ": " + why));
  if (watch_) {
    // Closed by either side on purpose (a peer closing its pooled connections as it exits is
    // routine: operations it broke say so themselves), or lost on an error.
    const bool routine = why == "connection closed" || why == "peer closed the connection";
    watch_->closed(why, routine ? LogLevel::Debug : LogLevel::Warn);
  }
  loop_.remove(socket_.get());
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
  }
  finished_changed_.notify_all();
  if (on_finished_) on_finished_();
}

}  // namespace memwire::detail
