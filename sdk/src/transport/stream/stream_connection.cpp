#include "transport/stream/stream_connection.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>

#include "thread_name.hpp"

namespace memwire::detail {

StreamConnection::StreamConnection(FileDescriptor socket, std::unique_ptr<FrameHandler> handler,
                                   std::string peer)
    : socket_(std::move(socket)), handler_(std::move(handler)), peer_(std::move(peer)) {
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
  {
    std::lock_guard lock(mutex_);
    if (closing_) return;
    closing_ = true;
    close_reason_ = reason;
  }
  ::shutdown(socket_.get(), SHUT_RDWR);
  queued_.notify_all();
  drained_.notify_all();
}

void StreamConnection::close_when_sent(std::chrono::milliseconds timeout) {
  {
    std::unique_lock lock(mutex_);
    draining_ = true;
    queued_.notify_all();
    drained_.wait_for(lock, timeout, [&] { return closing_; });
  }
  shutdown("connection closed");
}

bool StreamConnection::send(OutFrame frame) {
  std::unique_lock lock(mutex_);
  if (closing_) return false;
  if (writing_ || !queue_.empty()) {
    queue_.push_back(std::move(frame));
    queued_.notify_one();
    return true;
  }
  // Nothing ahead of it: out at once from this thread, the rest (if any) to the writer.
  writing_ = true;
  lock.unlock();
  const bool ok = write_frame(frame, /*blocking=*/false);
  lock.lock();
  writing_ = false;
  if (ok && !frame.finished) queue_.push_front(std::move(frame));
  if (!queue_.empty()) queued_.notify_one();
  lock.unlock();
  if (!ok) shutdown("send failed");
  return true;
}

bool StreamConnection::receive(void* data, std::size_t length) {
  return receive_all(socket_.get(), data, length);
}

bool StreamConnection::receive(std::span<iovec> pieces) {
  return receive_all(socket_.get(), pieces.data(), static_cast<int>(pieces.size()));
}

bool StreamConnection::discard(std::size_t length) {
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
  std::string reason = "peer closed the connection";
  // A peer that connects and stays silent holds a descriptor and two threads: not for long.
  bool awaiting_first_frame = first_frame_timeout_.count() > 0;
  if (awaiting_first_frame) set_receive_timeout(socket_.get(), first_frame_timeout_);
  for (;;) {
    FrameHeader header;
    if (!receive(&header, sizeof header)) {
      if (awaiting_first_frame && (errno == EAGAIN || errno == EWOULDBLOCK))
        reason = "no first frame within the handshake timeout";
      break;
    }
    if (awaiting_first_frame) {
      awaiting_first_frame = false;
      set_receive_timeout(socket_.get(), std::chrono::milliseconds(0));
    }
    if (auto problem = frame_header_problem(header)) {
      reason = "protocol error: " + *problem;
      break;
    }
    handler_->on_frame(*this, header);
  }
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
}

bool StreamConnection::write_frame(OutFrame& frame, bool blocking) {
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
  std::vector<iovec> many;
  iovec few[3];
  iovec* parts = few;
  std::size_t count = 0;
  if (frame.pin && !frame.pieces.empty()) {
    many.reserve(frame.pieces.size() + 2);
    parts = many.data();
  }
  auto add = [&](void* base, std::size_t length) {
    if (length == 0) return;
    if (parts == few) {
      few[count++] = {base, length};
    } else {
      many.push_back({base, length});
      ++count;
    }
  };
  add(&frame.header, sizeof frame.header);
  add(frame.text.data(), frame.text.size());
  if (frame.pin) {
    if (frame.data != nullptr) add(const_cast<std::byte*>(frame.data), frame.header.length);
    for (const auto& piece : frame.pieces) add(piece.iov_base, piece.iov_len);
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) total += parts[i].iov_len;
  // Skip what an earlier, partial write already sent.
  std::size_t first = 0;
  for (auto skip = frame.sent; skip > 0;) {
    auto step = std::min(skip, parts[first].iov_len);
    parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + step;
    parts[first].iov_len -= step;
    skip -= step;
    if (parts[first].iov_len == 0) ++first;
  }
  const auto left = total - frame.sent;
  const auto remaining_parts = static_cast<int>(count - first);
  if (blocking) {
    if (!send_all(socket_.get(), parts + first, remaining_parts)) return false;
    frame.sent += left;
  } else {
    auto sent = send_some(socket_.get(), parts + first, remaining_parts);
    if (sent < 0) return false;
    frame.sent += static_cast<std::size_t>(sent);
  }
  if (frame.sent == total) {
    frame.finished = true;
    frame.pin.reset();
  }
  return true;
}

}  // namespace memwire::detail
