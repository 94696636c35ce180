// A stream connection's reading, on its loop (see stream_connection.hpp): frames taken from the
// socket through the inbox, and a frame's payload streamed straight into registered memory
// (or skipped) before the next frame is read.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "transport/stream/socket.hpp"
#include "transport/stream/stream_connection.hpp"

namespace memwire::detail {
namespace {

// In the middle of a frame's payload the peer did not just leave between requests: it failed
// while sending (its memory unreadable, say) or its process ended.
constexpr const char* kClosedMidPayload =
    "peer closed the connection in the middle of a payload (it failed while sending, or its "
    "process ended)";

// Moves past `bytes` filled: whole parts dropped, the next one trimmed.
void advance(std::vector<iovec>& parts, std::size_t& first, std::size_t bytes) {
  while (first < parts.size() && bytes >= parts[first].iov_len) {
    bytes -= parts[first].iov_len;
    ++first;
  }
  if (first < parts.size() && bytes > 0) {
    parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + bytes;
    parts[first].iov_len -= bytes;
  }
}

}  // namespace

StreamConnection::Refill StreamConnection::refill_inbox(std::size_t most) {
  if (inbox_begin_ > 0) {
    std::memmove(inbox_.get(), inbox_.get() + inbox_begin_, buffered());
    inbox_end_ -= inbox_begin_;
    inbox_begin_ = 0;
  }
  if (!maybe_more_) return Refill::Again;
  for (;;) {
    const auto room = std::min(kInboxSize - inbox_end_, most);
    // recvmsg, not recv: a descriptor comes with its frame's first byte, which lands here (a
    // streamed payload reads no further than its own bytes). CLOEXEC: never inherited.
    iovec part{inbox_.get() + inbox_end_, room};
    alignas(cmsghdr) char
        control[CMSG_SPACE(sizeof(int) * kMostPassedPerMessage) + CMSG_SPACE(sizeof(ucred))];
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t received = ::recvmsg(socket_.get(), &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    const auto passed_before = passed_count_;
    if (received >= 0 && !take_control(message)) return Refill::Closed;
    if (received > 0) {
      inbox_end_ += static_cast<std::size_t>(received);
      // Short is drained, unless a descriptor came: the kernel ends a read after the bytes it
      // came with, whatever follows them (and the edge that announced those is spent).
      if (static_cast<std::size_t>(received) < room && !peer_ending_ &&
          passed_count_ == passed_before)
        maybe_more_ = false;
      return Refill::Got;
    }
    if (received < 0 && errno == EINTR) continue;
    if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Refill::Again;
    shutdown(sink_ || inline_left_ > 0 ? kClosedMidPayload : "peer closed the connection");
    return Refill::Closed;
  }
}

void StreamConnection::stop_reading_credentials() { pass_credentials(socket_.get(), false); }

bool StreamConnection::take_control(msghdr& message) {
  // Every descriptor is owned at once, so that any refusal below closes them all.
  std::size_t count = 0;
  bool other = false;
  for (auto* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_CREDENTIALS &&
        header->cmsg_len == CMSG_LEN(sizeof(ucred))) {
      ucred sender{};
      std::memcpy(&sender, CMSG_DATA(header), sizeof sender);
      // The first read's sender is the first frame's (pid 0: the kernel recorded none).
      if (!sender_said_) {
        first_sender_ = sender.pid;
        sender_said_ = true;
      } else if (sender.pid != first_sender_) {
        other_sender_ = true;
      }
      continue;
    }
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
      other = true;
      continue;
    }
    const auto bytes = header->cmsg_len - CMSG_LEN(0);
    for (std::size_t i = 0; i < bytes / sizeof(int); ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(header) + i * sizeof(int), sizeof received);
      passed_.emplace_back(received);
      ++count;
    }
  }
  passed_count_ += count;
  std::string problem;
  if ((message.msg_flags & MSG_CTRUNC) != 0 || count > kMostPassedPerMessage)
    problem = "more descriptors in one message than one frame may carry";
  else if (other)
    problem = "control data that is no descriptor";
  else if (passed_.size() > kMostPassedWaiting)
    problem = "more descriptors waiting for their frames than the connection takes";
  if (problem.empty()) return true;
  passed_.clear();
  shutdown("protocol error: " + problem);
  return false;
}

FileDescriptor StreamConnection::take_passed() {
  if (passed_.empty()) return {};
  auto taken = std::move(passed_.front());
  passed_.pop_front();
  return taken;
}

std::size_t StreamConnection::take_from_inbox(void* data, std::size_t length) {
  const auto count = std::min(length, buffered());
  if (count > 0) std::memcpy(data, inbox_.get() + inbox_begin_, count);
  inbox_begin_ += count;
  return count;
}

bool StreamConnection::receive(void* data, std::size_t length) {
  if (length > inline_left_) return false;
  take_from_inbox(data, length);
  inline_left_ -= length;
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

void StreamConnection::receive_into(std::vector<iovec> pieces, OnceTask then,
                                    std::optional<AccessGate::Pin> pin, AccessGate* gate) {
  std::uint64_t total = 0;
  for (const auto& piece : pieces) total += piece.iov_len;
  if (total == 0) return then();
  std::erase_if(pieces, [](const iovec& piece) { return piece.iov_len == 0; });
  header_alone_ = total >= kInboxSize;
  {
    std::lock_guard lock(sink_mutex_);
    sink_ = Sink{std::move(pieces), total, std::move(then), std::move(pin), gate};
  }
  if (gate != nullptr)
    gate->add_releaser(reinterpret_cast<std::uintptr_t>(this), [weak = weak_from_this()] {
      if (auto connection = weak.lock()) connection->divert_sink();
    });
}

void StreamConnection::discard(std::uint64_t length, OnceTask then) {
  if (length == 0) return then();
  std::lock_guard lock(sink_mutex_);
  sink_ = Sink{{}, length, std::move(then), std::nullopt, nullptr};
}

void StreamConnection::drop_sink() {
  std::optional<Sink> dropped;
  {
    std::lock_guard lock(sink_mutex_);
    dropped.swap(sink_);
  }
  if (dropped && dropped->gate != nullptr)
    dropped->gate->remove_releaser(reinterpret_cast<std::uintptr_t>(this));
}

void StreamConnection::divert_sink() {
  std::lock_guard lock(sink_mutex_);
  if (!sink_ || !sink_->pin) return;
  sink_->pieces.clear();  // the rest goes through the inbox, read and dropped
  sink_->pin.reset();
}

bool StreamConnection::fill_sink() {
  auto& sink = *sink_;
  std::size_t first = 0;  // the piece being filled
  // Held while bytes go into the memory; let go between steps, so that divert_sink() waits for
  // one step at most. A diverted sink has no pieces left.
  std::unique_lock lock(sink_mutex_);
  const auto let_diverter_in = [&] {
    lock.unlock();
    lock.lock();
    if (sink.pieces.empty()) first = 0;
  };
  auto fill_from_inbox = [&] {
    while (sink.left > 0 && buffered() > 0) {
      if (sink.pieces.empty()) {
        const auto skipped = std::min<std::uint64_t>(sink.left, buffered());
        inbox_begin_ += skipped;
        sink.left -= skipped;
        continue;
      }
      auto& piece = sink.pieces[first];
      const auto taken = take_from_inbox(piece.iov_base, piece.iov_len);
      sink.left -= taken;
      advance(sink.pieces, first, taken);
    }
  };
  fill_from_inbox();
  while (sink.left > 0) {
    let_diverter_in();
    if (sink.left < kDirectReceive) {  // a short rest: with the frames behind it, in one recv
      if (refill_inbox() != Refill::Got) {
        sink.pieces.erase(sink.pieces.begin(), sink.pieces.begin() + first);
        return false;
      }
      fill_from_inbox();
      continue;
    }
    if (!maybe_more_) {
      sink.pieces.erase(sink.pieces.begin(), sink.pieces.begin() + first);
      return false;
    }
    ssize_t received = 0;
    std::size_t asked = 0;
    if (sink.pieces.empty()) {  // skipped: through the (empty) inbox
      asked = std::min<std::uint64_t>(sink.left, kInboxSize);
      received = ::recv(socket_.get(), inbox_.get(), asked, MSG_DONTWAIT);
    } else {  // straight from the socket into the memory
      msghdr message{};
      message.msg_iov = sink.pieces.data() + first;
      message.msg_iovlen = std::min<std::size_t>(sink.pieces.size() - first, IOV_MAX);
      for (std::size_t i = 0; i < message.msg_iovlen; ++i) asked += message.msg_iov[i].iov_len;
      received = ::recvmsg(socket_.get(), &message, MSG_DONTWAIT);
    }
    if (received > 0 && static_cast<std::size_t>(received) < asked && !peer_ending_)
      maybe_more_ = false;
    if (received < 0 && errno == EINTR) continue;
    if (received <= 0) {
      if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        sink.pieces.erase(sink.pieces.begin(), sink.pieces.begin() + first);
        return false;
      }
      shutdown(kClosedMidPayload);
      return false;
    }
    sink.left -= static_cast<std::uint64_t>(received);
    if (!sink.pieces.empty()) advance(sink.pieces, first, static_cast<std::size_t>(received));
  }
  if (sink.gate != nullptr) sink.gate->remove_releaser(reinterpret_cast<std::uintptr_t>(this));
  auto then = std::move(sink.then);
  sink_.reset();  // its pin too: every byte landed
  lock.unlock();
  then();
  return true;
}

void StreamConnection::read_frames() {
  reading_connection_ = this;
  bool handled = false;  // a frame: the connection is in use (noted once, not per frame)
  std::size_t frames = 0;
  for (;;) {
    if (broken_.load(std::memory_order_acquire)) break;  // not past a shutdown on buffered frames
    if (sink_) {
      if (!fill_sink()) break;
      continue;
    }
    if (!room_for_requests()) {
      // Backed up: what is held back goes first, then no request is read (so none answered)
      // until the peer has taken enough of the answers; flush() reads on.
      send_held_back();
      if (!room_for_requests()) {
        paused_for_room_ = true;
        break;
      }
    }
    if (buffered() == 0 && !passed_.empty()) {
      // Every frame received was handled: a descriptor left is one no frame said it carried.
      passed_.clear();
      shutdown("protocol error: a descriptor that no frame carries");
      break;
    }
    if (buffered() < sizeof(FrameHeader)) {
      // Behind a payload larger than the inbox, the next header alone: another such payload
      // likely follows, and then goes straight to memory rather than through the inbox (a
      // copy more of up to 64 KiB a frame: 6% of a fan-in's 1 MiB answers).
      const auto most = header_alone_ ? sizeof(FrameHeader) - buffered() : kInboxSize;
      if (refill_inbox(most) != Refill::Got) break;
      continue;
    }
    FrameHeader header;
    std::memcpy(&header, inbox_.get() + inbox_begin_, sizeof header);
    if (driven_request_ != 0 && header.request_id != driven_request_) {
      stopped_at_other_ = true;  // not the waiter's: the loop handles it, on its own thread
      break;
    }
    if (auto problem = frame_header_problem(header)) {
      if (header.magic == FrameHeader::kMagic) handler_->on_malformed(header);
      shutdown("protocol error: " + *problem);
      break;
    }
    // Gathered before the handler runs. A piece list is bounded by its count; a text or a
    // mapped answer's locations claiming more than they may hold is not waited for: its handler
    // refuses it.
    auto wanted = inline_payload_bytes(header);
    if (!is_piece_request(header.type) && wanted > most_gathered_bytes(header)) wanted = 0;
    if (buffered() < sizeof header + wanted) {
      if (refill_inbox() != Refill::Got) break;
      continue;
    }
    inbox_begin_ += sizeof header;
    inline_left_ = wanted;
    header_alone_ = false;  // until the handler streams a large payload (receive_into)
    handled = true;
    if (awaiting_first_frame_) {
      awaiting_first_frame_ = false;
      note_activity();  // before the idle watch starts counting from it
      loop_.cancel(first_frame_timer_);
      if (idle_timeout_.count() > 0) watch_idleness();  // from now on, silence is idleness
    }
    ++frames;
    handler_->on_frame(*this, header);
    // Inline bytes the handler left (a frame it refused) are skipped with the frame.
    if (!broken_.load(std::memory_order_acquire)) inbox_begin_ += inline_left_;
    inline_left_ = 0;
  }
  if (handled) note_activity();
  if (std::exchange(poll_wanted_, false) && frames == 1 && loop_.in_loop_thread())
    loop_.poll_a_while();
  send_held_back();
  reading_connection_ = nullptr;
  // A waiter reading leaves the close to the loop (let_go_of_reading).
  if (broken_.load(std::memory_order_acquire) && driven_request_ == 0) close_on_loop();
}

}  // namespace memwire::detail
