#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "transport/stream/stream_connection.hpp"

// A connection's writing half: frames queued, held back, gathered into sendmsg calls and
// accounted as they leave (stream_connection.cpp has its life, stream_connection_reading.cpp
// its reading half).
namespace memwire::detail {

bool StreamConnection::hold_back(OutFrame& frame) {
  // A frame that runs something once sent (a one-request read's answer completes its owner) is
  // held too: it runs once the batch is out, or its on_dropped runs if the batch never leaves.
  if (reading_connection_ != this || !frame.pieces.empty() || frame.passed) return false;
  if (broken_.load(std::memory_order_acquire)) return false;
  if (buffered() < sizeof(FrameHeader)) return false;  // nothing more to handle
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
    // Dropped outside the lock: their on_dropped may close this very connection.
    auto dropped = std::move(held_back_);
    held_back_.clear();
    lock.unlock();
    return;
  }
  if (writing_ || !queue_.empty()) {  // behind what others queued: they go out in order
    for (auto& frame : held_back_) enqueue(std::move(frame));
    held_back_.clear();
    schedule_flush();
    return;
  }
  writing_ = true;
  lock.unlock();
  auto sent = send_some(socket_.get(), parts.data(), static_cast<int>(parts.size()));
  lock.lock();
  writing_ = false;
  // Account what went out frame by frame; the rest is queued, in order.
  const bool failed = sent < 0;
  const auto next = account_sent(held_back_, lengths, sent);
  // Closed meanwhile (another thread shut it down): what is left is dropped, not queued where
  // nothing would ever send or drop it again.
  std::vector<OutFrame> unsent;
  for (auto i = next; i < held_back_.size(); ++i) {
    if (closing_)
      unsent.push_back(std::move(held_back_[i]));
    else
      enqueue(std::move(held_back_[i]));
  }
  held_back_.resize(next);  // the frames that went out whole
  if (!queue_.empty()) schedule_flush();
  lock.unlock();
  unsent.clear();
  // Outside the lock, in the order they went out: what runs may send again.
  auto sent_frames = std::move(held_back_);
  held_back_.clear();
  for (auto& frame : sent_frames) frame.on_sent();
  if (failed) send_failed(send_failure());
}

std::size_t StreamConnection::account_sent(std::span<OutFrame> frames,
                                           std::span<const std::size_t> lengths, long sent) {
  std::size_t whole = 0;
  for (auto& frame : frames) {
    if (sent <= 0) break;
    const auto left = static_cast<long>(lengths[whole]);
    const auto taken = std::min(sent, left);
    frame.sent += static_cast<std::size_t>(taken);
    sent -= taken;
    if (taken < left) break;
    frame.finished = true;
    frame.pin.reset();
    ++whole;
  }
  return whole;
}

bool StreamConnection::write_together(std::span<OutFrame> frames, std::size_t& whole) {
  thread_local std::vector<iovec> parts;  // reused: no allocation per batch
  thread_local std::vector<std::size_t> lengths;
  parts.clear();
  lengths.clear();
  for (auto& frame : frames) lengths.push_back(frame_parts(frame, parts));
  // Only the first of a batch may carry a descriptor (flush), with the batch's first byte.
  const auto sent = send_some(socket_.get(), parts.data(), static_cast<int>(parts.size()),
                              passed_with(frames.front()));
  if (sent > 0) frames.front().passed.reset();
  if (sent < 0 && errno == EFAULT) {
    // Some frame's memory is unreadable, and nothing went out: frame by frame, so that
    // write_some() tells which and answers it as it does alone.
    for (whole = 0; whole < frames.size(); ++whole) {
      if (!write_some(frames[whole])) return false;
      if (!frames[whole].finished) break;
    }
    return true;
  }
  whole = account_sent(frames, lengths, sent);
  return sent >= 0;
}

bool StreamConnection::send(OutFrame frame) {
  // An answer given while the loop reads this connection: read_frames() notes the activity.
  if (reading_connection_ != this) note_activity();
  if (hold_back(frame)) return true;
  // Answers leave in the order they were given: those held back go first.
  if (reading_connection_ == this && !held_back_.empty()) send_held_back();
  // A small frame from another thread while answers to others are due here is left to the
  // loop (woken if it sleeps): it sends what gathered meanwhile in one sendmsg, where each
  // sender would have made its own (64 READs in flight: one per READ, and over TCP a segment
  // and an ACK each). Alone in flight (one READ at a time), it leaves at once: waiting for the
  // loop would only add latency. A frame marked by_loop always goes to the loop.
  const bool small_while_answers_due = frame.pieces.empty() && frame.data == nullptr &&
                                       frame.text.size() <= kMostCopiedWhenHeld &&
                                       handler_->answers_due();
  const bool to_loop = (frame.by_loop || small_while_answers_due) && !loop_.in_loop_thread();
  std::unique_lock lock(mutex_);
  if (closing_) return false;
  if (writing_ || !queue_.empty() || to_loop) {
    enqueue(std::move(frame));
    schedule_flush();
    return true;
  }
  // Nothing ahead of it: out at once from this thread; the rest, once the socket drains.
  writing_ = true;
  lock.unlock();
  const bool ok = write_some(frame);
  lock.lock();
  writing_ = false;
  const bool done = frame.finished;
  // The socket is full: the loop goes on with the rest. Unless the connection closed
  // meanwhile: then the frame is dropped here (with its pin) as shutdown() dropped the queued
  // ones. Not left to the next EPOLLOUT edge alone: one that came while this thread was writing
  // found writing_ set and was spent, and the socket, writable again, gives no other.
  if (ok && !done && !closing_) enqueue(std::move(frame), true);
  if (!queue_.empty()) schedule_flush();  // the rest of this frame, or others queued meanwhile
  const bool drained = done && queue_.empty() && draining_;
  lock.unlock();
  if (done) frame.on_sent();
  if (!ok) send_failed(send_failure());
  if (drained) shutdown("connection closed");
  return true;
}

std::string StreamConnection::send_failure() const {
  if (!local_memory_fault_.load()) return "send failed";
  return "the memory being sent is no longer readable (Bad address): a served file truncated, or "
         "memory unmapped, while it was sent";
}

void StreamConnection::send_failed(const std::string& why) {
  if (send_failed_.exchange(true)) return;
  {
    std::lock_guard lock(mutex_);
    send_failed_why_ = why;
  }
  loop_.post([weak = weak_from_this()] {
    if (auto connection = weak.lock()) connection->read_after_send_failure();
  });
}

void StreamConnection::read_after_send_failure() {
  if (!closed_on_loop_) {
    bool read = false;
    with_reading_on_loop(kMissedSendFailure, [&] {
      read = true;
      maybe_more_ = peer_ending_ = true;
      read_frames();
    });
    if (!read) return;  // a waiter reads: it hands this back when it lets go
  }
  std::string why;
  {
    std::lock_guard lock(mutex_);
    why = send_failed_why_;
  }
  shutdown(why);  // a no-op if what it read closed it already
}

void StreamConnection::schedule_flush() {
  if (flush_scheduled_ || closing_) return;
  flush_scheduled_ = true;
  loop_.post([weak = weak_from_this()] {
    if (auto connection = weak.lock()) connection->flush();
  });
}

void StreamConnection::flush() {
  bool drained = false;
  bool drained_queue = false;  // everything queued went out
  std::vector<OutFrame> batch;
  for (;;) {
    batch.clear();
    {
      std::lock_guard lock(mutex_);
      flush_scheduled_ = false;
      if (closing_ || writing_) return;
      if (queue_.empty()) {
        drained = draining_;
        drained_queue = true;
        break;
      }
      // The head, and the frames without piece lists behind it (a few iovecs each), up to a
      // bound: one sendmsg for many (requests other threads left to the loop).
      do {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
        queued_bytes_ -= queued_cost(batch.back());
      } while (!queue_.empty() && batch.size() < kMostHeldBack && batch.front().pieces.empty() &&
               queue_.front().pieces.empty() && !queue_.front().passed);
      writing_ = true;  // no sender may write inline in the middle of these frames
    }
    std::size_t whole = 0;
    bool ok = false;
    if (batch.size() == 1) {
      ok = write_some(batch.front());
      whole = batch.front().finished ? 1 : 0;
    } else {
      ok = write_together(batch, whole);
    }
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
      if (ok && !closing_)  // the rest back at the front, in order; else dropped below
        for (auto i = batch.size(); i-- > whole;) enqueue(std::move(batch[i]), true);
    }
    for (std::size_t i = 0; i < whole; ++i) batch[i].on_sent();
    const bool full = whole < batch.size();
    batch.clear();  // what was not sent nor queued again: dropped, outside the lock
    if (!ok) return send_failed(send_failure());
    if (full) break;  // the socket is full: the EPOLLOUT edge resumes
  }
  // Watched while frames wait for room; not once all went out.
  watch_writable(!drained_queue);
  if (drained) return shutdown("connection closed");
  // Requests left unread while the answers were backed up: read on now there is room.
  // (Only a serving connection pauses, and no waiter reads one: the flag is the loop's.)
  if (paused_for_room_ && room_for_requests()) {
    with_reading_on_loop(EPOLLIN, [&] {
      paused_for_room_ = false;
      read_frames();
    });
  }
}

void StreamConnection::enqueue(OutFrame frame, bool at_front) {
  queued_bytes_ += queued_cost(frame);
  if (at_front)
    queue_.push_front(std::move(frame));
  else
    queue_.push_back(std::move(frame));
}

std::size_t StreamConnection::queued_cost(const OutFrame& frame) {
  return sizeof frame + frame.text.size() + frame.pieces.size() * sizeof(iovec);
}

bool StreamConnection::room_for_requests() {
  return max_queued_bytes_ == 0 || queued_bytes_.load() <= max_queued_bytes_;
}

std::chrono::steady_clock::duration StreamConnection::idle_for() const noexcept {
  return std::chrono::steady_clock::now().time_since_epoch() -
         std::chrono::steady_clock::duration(last_activity_.load(std::memory_order_relaxed));
}

std::string StreamConnection::close_reason() const {
  std::lock_guard lock(mutex_);
  return close_reason_;
}

void StreamConnection::watch_idleness() {
  const auto left =
      idle_timeout_ - std::chrono::duration_cast<std::chrono::milliseconds>(idle_for());
  idle_timer_ =
      loop_.after(std::max(left, std::chrono::milliseconds(1)), [weak = weak_from_this()] {
        auto connection = weak.lock();
        if (!connection || connection->closed_on_loop_) return;
        bool sending = false;
        {
          std::lock_guard lock(connection->mutex_);
          sending = connection->writing_ || !connection->queue_.empty();
        }
        const bool idle = connection->idle_for() >= connection->idle_timeout_ && !sending &&
                          !connection->sink_ && !connection->handler_->busy();
        if (!idle) return connection->watch_idleness();
        connection->shutdown("idle for longer than the idle timeout (" +
                             std::to_string(connection->idle_timeout_.count()) + " ms)");
      });
}

std::size_t StreamConnection::frame_parts(OutFrame& frame, std::vector<iovec>& parts) {
  const bool registered = frame.data != nullptr || !frame.pieces.empty();
  if (frame.sent == 0) {
    if (registered && !frame.pin) {
      frame.pin = frame.gate->pin();
      if (!frame.pin) {
        frame.header.code = wire_code(ErrorCode::Cancelled);
        frame.header.length = 0;
        if (is_pool_request(frame.header.type)) {
          // A pool request without its bytes: its transfer's failure goes instead (same
          // request id, so the accounting balances), and the owner delivers no tag for it.
          auto end = as_pool(frame.header);
          end.type = FrameType::PoolEnd;
          end.piece_count = 0;
          end.tag_bytes = 0;
          frame.header = as_frame(end);
          frame.text.clear();
          // With the reason the transfer ended (a LayerSender's cancel reason), as its own
          // failure notice would say: the owner ends the tag's waits on the first it reads.
          if (auto failure = frame.operation ? frame.operation->failure() : std::nullopt) {
            frame.header.code = wire_code(failure->code());
            frame.text = std::string(failure->message()).substr(0, FrameHeader::kMaxText);
            frame.header.length = frame.text.size();
          }
        } else if (is_piece_request(frame.header.type)) {
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

bool StreamConnection::write_some(OutFrame& frame) {
  thread_local std::vector<iovec> parts;  // reused: no allocation per frame
  for (;;) {
    parts.clear();
    const auto left = frame_parts(frame, parts);
    if (left == 0) break;
    const auto sent =
        send_some(socket_.get(), parts.data(), static_cast<int>(parts.size()), passed_with(frame));
    if (sent > 0) frame.passed.reset();  // it went with the first byte: ours closes
    if (sent < 0) {
      if (errno != EFAULT) return false;
      local_memory_fault_ = true;
      if (frame.sent > 0 || frame.header.type != FrameType::ReadResponse) return false;
      // A read's answer whose memory failed before a byte of it left: the framing holds, so
      // the reader is told why instead of losing the connection, and the answer completes
      // nothing (its dropped-notice runs now, while the fault is known).
      frame.header.code = wire_code(ErrorCode::Transport);
      frame.header.flags = 0;
      frame.text = send_failure();
      frame.data = nullptr;
      frame.pieces.clear();
      frame.pin.reset();
      frame.gate = nullptr;
      frame.on_sent = {};
      if (frame.on_dropped) {
        auto dropped = std::move(frame.on_dropped);
        dropped();
      }
      local_memory_fault_ = false;  // handled: the connection goes on
      continue;
    }
    if (sent == 0) return true;  // full: the rest waits for the socket to drain
    frame.sent += static_cast<std::size_t>(sent);
    if (static_cast<std::size_t>(sent) < left) continue;  // more parts than one call takes
    break;
  }
  frame.finished = true;
  frame.pin.reset();
  return true;
}

}  // namespace memwire::detail
