#include "transport/stream/stream_connection.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "thread_name.hpp"

namespace memwire::detail {

namespace {

// The connection whose reader loop runs on this thread, if any.
thread_local const StreamConnection* reading_connection = nullptr;

}  // namespace

StreamConnection::StreamConnection(FileDescriptor socket, std::unique_ptr<FrameHandler> handler,
                                   std::string peer)
    : socket_(std::move(socket)),
      handler_(std::move(handler)),
      peer_(std::move(peer)),
      inbox_(std::make_unique_for_overwrite<std::byte[]>(kInboxSize)) {
  tune_data_socket(socket_.get());
}

StreamConnection::~StreamConnection() { join(); }

void StreamConnection::join() {
  shutdown("connection closed");
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
}

void StreamConnection::run(std::chrono::milliseconds first_frame_timeout,
                           std::function<void()> on_finished) {
  first_frame_timeout_ = first_frame_timeout;
  on_finished_ = std::move(on_finished);
  running_threads_ = 2;
  reader_ = std::thread([this] {
    name_this_thread("memwire-reader");
    read_loop();
    if (--running_threads_ == 0 && on_finished_) on_finished_();
  });
  try {
    writer_ = std::thread([this] {
      name_this_thread("memwire-writer");
      write_loop();
      if (--running_threads_ == 0 && on_finished_) on_finished_();
    });
  } catch (const std::system_error&) {  // out of threads: nothing may run half-started
    --running_threads_;
    join();
    throw;
  }
}

namespace {

void set_receive_timeout(int socket, std::chrono::milliseconds timeout) {
  timeval limit{static_cast<time_t>(timeout.count() / 1000),
                static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
}

}  // namespace

bool StreamConnection::alive() const {
  std::lock_guard lock(mutex_);
  return !closing_;
}

void StreamConnection::shutdown(const std::string& reason) {
  // A handler that answers, then closes (a protocol error) meant the answer to go first.
  if (reading_connection == this) send_held_back();
  {
    std::lock_guard lock(mutex_);
    if (closing_) return;
    closing_ = true;
    close_reason_ = reason;
  }
  broken_.store(true, std::memory_order_release);
  ::shutdown(socket_.get(), SHUT_RDWR);
  queued_.notify_all();
  drained_.notify_all();
  room_.notify_all();
}

void StreamConnection::close_when_sent(std::chrono::milliseconds timeout) {
  if (reading_connection == this) send_held_back();
  {
    std::unique_lock lock(mutex_);
    draining_ = true;
    queued_.notify_all();
    drained_.wait_for(lock, timeout, [&] { return closing_; });
  }
  shutdown("connection closed");
}

bool StreamConnection::hold_back(OutFrame& frame) {
  if (reading_connection != this || !frame.pieces.empty()) return false;
  if (broken_.load(std::memory_order_acquire)) return false;
  if (inbox_end_ - inbox_begin_ < sizeof(FrameHeader)) return false;  // nothing more to handle
  if (frame.data != nullptr) {
    // A held frame must not hold its registration open (completing one waits for its pins,
    // here on this very thread): a short answer's bytes are copied out under the pin instead;
    // the socket would copy them a moment later anyway.
    if (!frame.text.empty() || frame.header.length > kMostCopiedWhenHeld) return false;
    if (!frame.pin) frame.pin = frame.gate->pin();
    if (!frame.pin) return false;  // revoked: the usual path sends it as Cancelled
    frame.text.assign(reinterpret_cast<const char*>(frame.data), frame.header.length);
    frame.data = nullptr;
    frame.pin.reset();
    frame.gate = nullptr;
    frame.keep_alive.reset();
  } else if (frame.pin) {
    return false;
  }
  held_back_.push_back(std::move(frame));
  if (held_back_.size() == kMostHeldBack) send_held_back();
  return true;
}

void StreamConnection::send_held_back() {
  if (held_back_.empty()) return;
  std::vector<iovec> parts;
  std::vector<std::size_t> lengths;  // what is left of each frame
  parts.reserve(held_back_.size() * 3);
  lengths.reserve(held_back_.size());
  for (auto& frame : held_back_) lengths.push_back(frame_parts(frame, parts));
  std::unique_lock lock(mutex_);
  if (closing_) {
    held_back_.clear();
    return;
  }
  if (writing_ || !queue_.empty()) {  // behind what others queued: the writer takes them all
    for (auto& frame : held_back_) enqueue(std::move(frame));
    held_back_.clear();
    queued_.notify_one();
    return;
  }
  writing_ = true;
  lock.unlock();
  auto sent = send_some(socket_.get(), parts.data(), static_cast<int>(parts.size()));
  lock.lock();
  writing_ = false;
  // Account what went out frame by frame; the rest goes to the writer, in order.
  std::size_t next = 0;
  for (auto& frame : held_back_) {
    if (sent > 0) {
      const auto left = static_cast<long>(lengths[next]);
      const auto taken = std::min(sent, left);
      frame.sent += static_cast<std::size_t>(taken);
      sent -= taken;
      if (taken == left) {
        frame.finished = true;
        frame.pin.reset();
        ++next;
        continue;
      }
    }
    break;
  }
  const bool failed = sent < 0;
  for (auto i = next; i < held_back_.size(); ++i) enqueue(std::move(held_back_[i]));
  held_back_.clear();
  if (!queue_.empty()) queued_.notify_one();
  lock.unlock();
  if (failed) shutdown("send failed");
}

std::chrono::steady_clock::duration StreamConnection::idle_for() const noexcept {
  return std::chrono::steady_clock::now().time_since_epoch() -
         std::chrono::steady_clock::duration(last_activity_.load(std::memory_order_relaxed));
}

std::string StreamConnection::close_reason() const {
  std::lock_guard lock(mutex_);
  return close_reason_;
}

bool StreamConnection::send(OutFrame frame) {
  note_activity();
  if (hold_back(frame)) return true;
  std::unique_lock lock(mutex_);
  if (closing_) return false;
  if (writing_ || !queue_.empty()) {
    enqueue(std::move(frame));
    queued_.notify_one();
    return true;
  }
  // Nothing ahead of it: out at once from this thread, the rest (if any) to the writer.
  writing_ = true;
  lock.unlock();
  const bool ok = write_frame(frame, /*blocking=*/false);
  lock.lock();
  writing_ = false;
  if (ok && !frame.finished) enqueue(std::move(frame), /*at_front=*/true);
  if (!queue_.empty()) queued_.notify_one();
  lock.unlock();
  if (!ok) shutdown("send failed");
  return true;
}

bool StreamConnection::refill_inbox() {
  send_held_back();  // about to wait on the peer: it may be waiting for these
  inbox_begin_ = 0;
  inbox_end_ = 0;
  for (;;) {
    ssize_t received = ::recv(socket_.get(), inbox_.get(), kInboxSize, 0);
    if (received < 0 && errno == EINTR) continue;
    if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && idle_watched_) {
      // Silent for idle_timeout_: closed only when nothing is in progress either way.
      bool sending = false;
      {
        std::lock_guard lock(mutex_);
        sending = writing_ || !queue_.empty();
      }
      if (sending || handler_->busy() || idle_for() < idle_timeout_ / 2) continue;
      idle_closed_ = true;
      return false;
    }
    if (received <= 0) return false;
    inbox_end_ = static_cast<std::size_t>(received);
    return true;
  }
}

std::size_t StreamConnection::take_from_inbox(void* data, std::size_t length) {
  const auto count = std::min(length, inbox_end_ - inbox_begin_);
  if (count > 0) std::memcpy(data, inbox_.get() + inbox_begin_, count);
  inbox_begin_ += count;
  return count;
}

bool StreamConnection::receive(void* data, std::size_t length) {
  auto* cursor = static_cast<std::byte*>(data);
  for (;;) {
    const auto taken = take_from_inbox(cursor, length);
    cursor += taken;
    length -= taken;
    if (length == 0) return true;
    // The inbox is empty here.
    if (length >= kDirectReceive) {
      send_held_back();
      return receive_all(socket_.get(), cursor, length);
    }
    if (!refill_inbox()) return false;
  }
}

bool StreamConnection::receive(std::span<iovec> pieces) {
  auto* part = pieces.data();
  auto count = static_cast<int>(pieces.size());
  std::size_t left = 0;
  for (const auto& piece : pieces) left += piece.iov_len;
  while (count > 0) {
    if (part->iov_len == 0) {
      ++part;
      --count;
      continue;
    }
    if (inbox_begin_ == inbox_end_) {
      if (left >= kDirectReceive) {
        send_held_back();
        return receive_all(socket_.get(), part, count);
      }
      if (!refill_inbox()) return false;
    }
    const auto taken = take_from_inbox(part->iov_base, part->iov_len);
    part->iov_base = static_cast<char*>(part->iov_base) + taken;
    part->iov_len -= taken;
    left -= taken;
  }
  return true;
}

bool StreamConnection::discard(std::size_t length) {
  const auto buffered = std::min(length, inbox_end_ - inbox_begin_);
  inbox_begin_ += buffered;
  length -= buffered;
  if (length > 0) send_held_back();
  std::array<std::byte, 64 * 1024> sink;
  while (length > 0) {
    auto piece = std::min(length, sink.size());
    if (!receive_all(socket_.get(), sink.data(), piece)) return false;
    length -= piece;
  }
  return true;
}

std::optional<std::string> StreamConnection::receive_text(std::uint64_t length) {
  if (auto problem = text_payload_problem(length)) {
    shutdown("protocol error: " + *problem);
    return std::nullopt;
  }
  std::string text(length, '\0');
  if (!receive(text.data(), text.size())) return std::nullopt;
  return text;
}

void StreamConnection::read_loop() {
  reading_connection = this;
  std::string reason = "peer closed the connection";
  // A peer that connects and stays silent holds a descriptor and two threads: not for long.
  bool awaiting_first_frame = first_frame_timeout_.count() > 0;
  if (awaiting_first_frame) set_receive_timeout(socket_.get(), first_frame_timeout_);
  for (;;) {
    if (broken_.load(std::memory_order_acquire)) break;  // not past a shutdown on buffered frames
    if (!wait_for_room()) break;
    FrameHeader header;
    if (!receive(&header, sizeof header)) {
      if (awaiting_first_frame && (errno == EAGAIN || errno == EWOULDBLOCK))
        reason = "no first frame within the handshake timeout";
      else if (idle_closed_)
        reason = "idle for longer than the idle timeout (" + std::to_string(idle_timeout_.count()) +
                 " ms)";
      break;
    }
    note_activity();
    if (awaiting_first_frame) {
      awaiting_first_frame = false;
      set_receive_timeout(socket_.get(), idle_timeout_);  // from now on, silence is idleness
      idle_watched_ = idle_timeout_.count() > 0;
    }
    if (auto problem = frame_header_problem(header)) {
      reason = "protocol error: " + *problem;
      break;
    }
    handler_->on_frame(*this, header);
  }
  held_back_.clear();  // the connection is closing: they would not arrive
  reading_connection = nullptr;
  shutdown(reason);
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
    const auto level = routine ? LogLevel::Debug : LogLevel::Warn;
    watch_->closed(why, level);
  }
}

void StreamConnection::write_loop() {
  for (;;) {
    OutFrame frame;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return closing_ || (!writing_ && (draining_ || !queue_.empty())); });
      if (closing_ || (draining_ && queue_.empty())) break;
      frame = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= queued_cost(frame);
      if (queued_bytes_ <= max_queued_bytes_) room_.notify_one();
      writing_ = true;  // no sender may write inline in the middle of this frame
    }
    const bool ok = write_frame(frame, /*blocking=*/true);
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
    }
    if (!ok) {
      shutdown("send failed");
      break;
    }
  }
  shutdown("connection closed");
  // Frames still queued are dropped with their pins; the reader reports the loss.
  std::deque<OutFrame> dropped;
  std::lock_guard lock(mutex_);
  dropped.swap(queue_);
  queued_bytes_ = 0;
}

std::size_t StreamConnection::queued_cost(const OutFrame& frame) {
  return sizeof frame + frame.text.size() + frame.pieces.size() * sizeof(iovec);
}

void StreamConnection::enqueue(OutFrame frame, bool at_front) {
  queued_bytes_ += queued_cost(frame);
  if (at_front)
    queue_.push_front(std::move(frame));
  else
    queue_.push_back(std::move(frame));
}

bool StreamConnection::wait_for_room() {
  if (max_queued_bytes_ == 0) return true;
  {
    std::unique_lock lock(mutex_);
    if (queued_bytes_ <= max_queued_bytes_) return !closing_;
  }
  // Backed up: what is held back goes to the writer first, then no request is read (so none is
  // answered) until the peer has taken enough of the answers.
  send_held_back();
  std::unique_lock lock(mutex_);
  room_.wait(lock, [&] { return closing_ || queued_bytes_ <= max_queued_bytes_; });
  return !closing_;
}

std::size_t StreamConnection::frame_parts(OutFrame& frame, std::vector<iovec>& parts) {
  const bool registered = frame.data != nullptr || !frame.pieces.empty();
  if (frame.sent == 0) {
    if (registered && !frame.pin) {
      frame.pin = frame.gate->pin();
      if (!frame.pin) {
        frame.header.code = wire_code(ErrorCode::Cancelled);
        frame.header.length = 0;
        if (is_piece_request(frame.header.type)) {
          // Without its bytes a piece request would break the framing: an empty single write
          // goes instead, refused by the peer, so its request accounting still balances.
          frame.header.type = FrameType::WriteRequest;
          frame.header.index = 0;
          frame.text.clear();
        }
      }
    } else if (!registered && !frame.text.empty() && !is_piece_request(frame.header.type)) {
      frame.header.length = frame.text.size();  // a piece request's names its pieces' bytes
    }
  }
  // Not header.length: a read request (or a cross-memory one) names a length it carries none of.
  // What an earlier, partial write already sent is skipped.
  auto skip = frame.sent;
  std::size_t left = 0;
  auto add = [&](const void* base, std::size_t length) {
    const auto step = std::min(skip, length);
    skip -= step;
    if (length == step) return;
    parts.push_back({const_cast<char*>(static_cast<const char*>(base)) + step, length - step});
    left += length - step;
  };
  add(&frame.header, sizeof frame.header);
  add(frame.text.data(), frame.text.size());
  if (frame.pin) {
    if (frame.data != nullptr) add(frame.data, frame.header.length);
    for (const auto& piece : frame.pieces) add(piece.iov_base, piece.iov_len);
  }
  return left;
}

bool StreamConnection::write_frame(OutFrame& frame, bool blocking) {
  thread_local std::vector<iovec> parts;  // reused: no allocation per frame
  parts.clear();
  const auto left = frame_parts(frame, parts);
  std::size_t sent = left;
  if (blocking) {
    if (!send_all(socket_.get(), parts.data(), static_cast<int>(parts.size()))) return false;
  } else {
    const auto some = send_some(socket_.get(), parts.data(), static_cast<int>(parts.size()));
    if (some < 0) return false;
    sent = static_cast<std::size_t>(some);
  }
  frame.sent += sent;
  if (sent == left) {
    frame.finished = true;
    frame.pin.reset();
  }
  return true;
}

}  // namespace memwire::detail
