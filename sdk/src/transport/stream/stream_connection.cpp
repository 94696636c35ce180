#include "transport/stream/stream_connection.hpp"

#include <sys/socket.h>

#include <array>

namespace memwire::detail {

StreamConnection::StreamConnection(FileDescriptor socket, std::unique_ptr<FrameHandler> handler,
                             std::string peer)
    : socket_(std::move(socket)), handler_(std::move(handler)), peer_(std::move(peer)) {
  tune_data_socket(socket_.get());
}

StreamConnection::~StreamConnection() {
  shutdown("connection closed");
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
}

void StreamConnection::run() {
  reader_ = std::thread([this] { read_loop(); });
  writer_ = std::thread([this] { write_loop(); });
}

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
  {
    std::lock_guard lock(mutex_);
    if (closing_) return false;
    queue_.push_back(std::move(frame));
  }
  queued_.notify_one();
  return true;
}

bool StreamConnection::receive(void* data, std::size_t length) {
  return receive_all(socket_.get(), data, length);
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
  if (length > FrameHeader::kMaxText) {
    shutdown("protocol error: oversized text payload");
    return std::nullopt;
  }
  std::string text(length, '\0');
  if (!receive(text.data(), text.size())) return std::nullopt;
  return text;
}

void StreamConnection::read_loop() {
  std::string reason = "peer closed the connection";
  for (;;) {
    FrameHeader header;
    if (!receive(&header, sizeof header)) break;
    if (header.magic != FrameHeader::kMagic || header.version != FrameHeader::kVersion) {
      reason = "protocol error: bad frame header";
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
}

void StreamConnection::write_loop() {
  for (;;) {
    OutFrame frame;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return closing_ || draining_ || !queue_.empty(); });
      if (closing_ || (draining_ && queue_.empty())) break;
      frame = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!write_frame(frame)) {
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

bool StreamConnection::write_frame(OutFrame& frame) {
  std::optional<AccessGate::Pin> pin;
  if (frame.data != nullptr) {
    pin = frame.gate->pin();
    if (!pin) {
      frame.header.code = wire_code(ErrorCode::Cancelled);
      frame.header.length = 0;
    }
  } else if (!frame.text.empty()) {
    frame.header.length = frame.text.size();
  }
  iovec parts[2] = {{&frame.header, sizeof frame.header}, {nullptr, 0}};
  if (pin) {
    parts[1] = {const_cast<std::byte*>(frame.data), frame.header.length};
  } else if (!frame.text.empty()) {
    parts[1] = {frame.text.data(), frame.text.size()};
  }
  return send_all(socket_.get(), parts, 2);
}

}  // namespace memwire::detail
