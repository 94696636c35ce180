#include "transport/stream/stream_active_side.hpp"

namespace memwire::detail {

std::uint64_t StreamActiveSide::expect(std::shared_ptr<StreamTransfer> transfer,
                                       std::byte* destination, std::uint64_t length,
                                       std::optional<AccessGate::Pin> pin, std::byte* local,
                                       std::vector<iovec> pieces, std::vector<iovec> local_pieces) {
  std::lock_guard lock(mutex_);
  if (closed_) return 0;
  auto id = next_id_++;
  carried_.store(true, std::memory_order_relaxed);
  pending_.emplace(id, Pending{std::move(transfer), destination, length, std::move(pin), local,
                               std::move(pieces), std::move(local_pieces)});
  waiting_.store(pending_.size(), std::memory_order_relaxed);
  return id;
}

std::optional<StreamActiveSide::Pending> StreamActiveSide::take(std::uint64_t request_id) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return std::nullopt;
  auto pending = std::move(it->second);
  pending_.erase(it);
  waiting_.store(pending_.size(), std::memory_order_relaxed);
  return pending;
}

void mark_pool_frame(FrameHeader& header, FrameType type, std::uint64_t pool_transfer_id,
                     const TransferHeader& transfer) {
  auto pool = as_pool(header);
  pool.type = type;
  pool.transfer = pool_transfer_id;
  pool.generation = static_cast<std::uint32_t>(transfer.generation);
  // Every request names its transfer's tag: the owner admits the transfer with it, and
  // delivers it at the end. The end itself carries none.
  pool.tag_bytes = type == FrameType::PoolEnd ? 0 : static_cast<std::uint32_t>(transfer.tag.size());
  header = as_frame(pool);
}

OutFrame notice_frame(const ActiveTransfer& transfer, std::uint64_t pool_transfer_id) {
  OutFrame frame;
  frame.header.type = FrameType::Notice;
  frame.header.key = transfer.key();
  frame.header.token = transfer.token();
  if (const auto& header = transfer.request().header)
    mark_pool_frame(frame.header, FrameType::PoolEnd, pool_transfer_id, *header);
  return frame;
}

void send_completion_notice(const std::shared_ptr<StreamTransfer>& transfer) {
  auto connection = transfer->notice_connection.lock();
  std::uint64_t id = 0;
  if (connection) id = connection->active().expect(transfer, nullptr, 0);
  auto frame = notice_frame(*transfer->transfer, transfer->pool_transfer_id);
  frame.header.request_id = id;
  frame.by_loop = transfer->bytes_by_loop;  // behind the bytes, which the loop sends
  if (id == 0 || !connection->send(std::move(frame)))
    transfer->transfer->fail(
        Error(ErrorCode::PeerLost, "connection lost before the completion notice"));
}

void StreamActiveSide::chunk_done(StreamConnection&,
                                  const std::shared_ptr<StreamTransfer>& transfer) {
  if (transfer->chunks_left.fetch_sub(1) != 1 ||
      transfer->transfer->status() != OperationStatus::InProgress)
    return;
  if (transfer->transfer->request().header) {
    switch (transfer->pool_notice) {
      case PoolNotice::None:
      case PoolNotice::InRequest:
        return transfer->transfer->succeed();
      case PoolNotice::AfterAnswers:
        return send_completion_notice(transfer);
      case PoolNotice::Pipelined:
        return;  // its tag is out already: the tag's answer ends it
    }
  }
  if (transfer->single_request && !transfer->mapped) {
    transfer->transfer->succeed();
  } else {
    send_completion_notice(transfer);
  }
}

void StreamActiveSide::on_frame(StreamConnection& connection, const FrameHeader& header) {
  if (header.type == FrameType::HelloResponse && header.code != 0)
    return refused(connection, header);
  if (header.type != FrameType::ReadResponse && header.type != FrameType::WriteResponse &&
      header.type != FrameType::NoticeResponse) {
    connection.shutdown("protocol error: unexpected frame for the active side");
    return;
  }
  auto pending = take(header.request_id);
  if (!pending) return unasked_answer(connection, header);
  if (auto problem = unasked_in(header, *pending))
    return break_protocol(connection, std::move(pending), *problem);
  if (header.code == 0 && (header.flags & frame_flags::kMapped))
    return copy_mapped(connection, header, std::move(*pending));
  pending->pin.reset();  // only cross-memory requests hold one: done with it
  if (header.code != 0) {
    auto text = connection.receive_text(header.length);
    if (!text) return lost_mid_answer(connection, *pending);
    fail(*pending, Error(error_code_from_wire(header.code),
                         "the passive side refused: " +
                             (text->empty() ? "its operation ended during the transfer" : *text)));
    return;
  }
  auto& transfer = *pending->transfer->transfer;
  switch (header.type) {
    case FrameType::ReadResponse: {
      if (header.flags & frame_flags::kCrossMemory) {  // the passive side copied it already
        if (header.length != 0)
          return break_protocol(connection, std::move(pending),
                                "cross-memory read response with a payload");
        return chunk_done(connection, pending->transfer);
      }
      const bool expected = pending->destination != nullptr || !pending->pieces.empty();
      if (!expected || header.length != pending->length)
        return break_protocol(connection, std::move(pending), "read response of the wrong length");
      // Pinned while the bytes land in the caller's buffer; a cancelled transfer drains them.
      auto pin = transfer.gate().pin();
      std::vector<iovec> into;
      if (pin) {
        into = pending->pieces.empty()
                   ? std::vector<iovec>{{pending->destination,
                                         static_cast<std::size_t>(header.length)}}
                   : std::move(pending->pieces);
      }
      // The pin goes with the bytes' destination: should the transfer end before they have
      // all landed (cancelled, dropped), the rest is discarded at once, not waited for.
      AnswerInFlight answer(pending->transfer, connection.peer(), std::nullopt);
      // Staged to the device: each answer's bytes are queued there as soon as they landed.
      auto staged = transfer.lands_on_device() ? into : std::vector<iovec>{};
      auto landed = [this, &connection, answer = std::move(answer),
                     staged = std::move(staged)]() mutable {
        auto done = answer.landed();
        for (const auto& piece : staged) done->transfer->landed(piece.iov_base, piece.iov_len);
        chunk_done(connection, done);
      };
      if (into.empty()) return connection.discard(header.length, std::move(landed));
      return connection.receive_into(std::move(into), std::move(landed), std::move(pin),
                                     &transfer.gate());
    }
    case FrameType::WriteResponse:
      return chunk_done(connection, pending->transfer);
    default:  // NoticeResponse: the passive side accepted the completion notice
      transfer.succeed();
  }
}

std::optional<std::string> StreamActiveSide::unasked_in(const FrameHeader& header,
                                                        const Pending& pending) {
  if (header.code != 0) return std::nullopt;  // a refusal: its flags mean nothing
  // A cross-memory request holds a pin; only one that passed `local` asked for a mapping.
  const bool cross = pending.pin.has_value();
  if ((header.flags & frame_flags::kMapped) &&
      ((pending.local == nullptr && pending.local_pieces.empty()) ||
       header.type == FrameType::NoticeResponse))
    return "mapped answer to a request that did not ask for one";
  if ((header.flags & frame_flags::kCrossMemory) && !cross)
    return "cross-memory answer to a request that was not one";
  if ((header.flags & frame_flags::kDescriptor) && !(header.flags & frame_flags::kMapped))
    return "a descriptor with an answer that is not mapped";
  // A read's requests are answered by a ReadResponse, its notice by a NoticeResponse: any
  // other answer would complete the read with its bytes not here.
  if (pending.transfer->transfer->kind() == OperationKind::Read) {
    const bool request = cross || pending.destination != nullptr || !pending.pieces.empty();
    if (header.type == FrameType::WriteResponse ||
        (request && header.type == FrameType::NoticeResponse))
      return "a read request answered by a write or notice response";
  }
  return std::nullopt;
}

void StreamActiveSide::unasked_answer(StreamConnection& connection, const FrameHeader& header) {
  // Failure notices go out without a request id: their answer, a text at most, is dropped (the
  // text was gathered with the header and is skipped with the frame). Anything else answers
  // nothing we asked, and its payload is no reason to read on.
  constexpr std::uint8_t kAsked = frame_flags::kCrossMemory | frame_flags::kMapped;
  if (header.request_id == 0 && header.type == FrameType::NoticeResponse &&
      header.length <= FrameHeader::kMaxText && (header.flags & kAsked) == 0)
    return;
  break_protocol(
      connection, std::nullopt,
      "answer to request " + std::to_string(header.request_id) + ", which is not waiting for one");
}

AnswerInFlight::~AnswerInFlight() {
  pin_.reset();  // never hold a pin while failing: fail() closes the gate, which waits
  if (transfer_)
    transfer_->transfer->fail(
        Error(ErrorCode::PeerLost, "connection to " + peer_ + " lost during an answer"));
}

std::shared_ptr<StreamTransfer> AnswerInFlight::landed() {
  pin_.reset();
  return std::exchange(transfer_, nullptr);
}

void StreamActiveSide::fail(Pending& pending, const Error& error) {
  pending.pin.reset();  // never hold a pin while failing: fail() closes the gate, which waits
  pending.transfer->transfer->fail(error);
}

void StreamActiveSide::break_protocol(StreamConnection& connection, std::optional<Pending> taken,
                                      const std::string& what) {
  connection.shutdown("protocol error: " + what);
  fail_all(std::move(taken),
           Error(ErrorCode::Protocol, "protocol error from " + connection.peer() + ": " + what));
}

// Handles a request already taken from the pending table: closing the connection would not
// fail it, so this does.
void StreamActiveSide::lost_mid_answer(StreamConnection& connection, Pending& pending) {
  fail(pending,
       Error(ErrorCode::PeerLost, "connection to " + connection.peer() + " lost during an answer"));
}

void StreamActiveSide::copy_mapped(StreamConnection& connection, const FrameHeader& header,
                                   Pending pending) {
  if (!same_host_)  // never asked for one (tcp): unasked_in refused it already
    return break_protocol(connection, std::move(pending), "mapped answer over a socket");
  if (!pending.local_pieces.empty())
    return copy_mapped_pieces(connection, header, std::move(pending));
  SharedLocation location;
  if (header.length != sizeof location)
    return break_protocol(connection, std::move(pending), "mapped answer of the wrong length");
  auto passed = take_passed(connection, header);
  if (!connection.receive(&location, sizeof location)) return lost_mid_answer(connection, pending);
  try {
    same_host_->copy_mapped(location, std::move(passed), pending.local, pending.length,
                            header.type == FrameType::ReadResponse);
  } catch (const Error& error) {
    return refuse_mapped(connection, std::move(pending), error);
  }
  mapped_copy_done(connection, pending);
}

std::optional<FileDescriptor> StreamActiveSide::take_passed(StreamConnection& connection,
                                                            const FrameHeader& header) {
  if ((header.flags & frame_flags::kDescriptor) == 0) return std::nullopt;
  return connection.take_passed();  // empty when it did not come: the same-host part refuses it
}

void StreamActiveSide::refuse_mapped(StreamConnection& connection, Pending pending,
                                     const Error& error) {
  // An answer that does not hold up is the owner's fault: the connection goes, not only this
  // transfer. The kernel refusing a checked mapping fails the transfer alone.
  if (error.code() != ErrorCode::Protocol) return fail(pending, error);
  break_protocol(connection, std::move(pending), std::string(error.message()));
}

void StreamActiveSide::copy_mapped_pieces(StreamConnection& connection, const FrameHeader& header,
                                          Pending pending) {
  SharedSpan span;
  std::vector<std::uint64_t> offsets(pending.local_pieces.size());
  if (header.length != sizeof span + offsets.size() * sizeof(std::uint64_t))
    return break_protocol(connection, std::move(pending), "mapped answer of the wrong length");
  auto passed = take_passed(connection, header);
  if (!connection.receive(&span, sizeof span) ||
      !connection.receive(offsets.data(), offsets.size() * sizeof(std::uint64_t)))
    return lost_mid_answer(connection, pending);
  try {
    same_host_->copy_mapped_pieces(span, std::move(passed), pending.local_pieces, offsets,
                                   header.type == FrameType::ReadResponse);
  } catch (const Error& error) {
    return refuse_mapped(connection, std::move(pending), error);
  }
  mapped_copy_done(connection, pending);
}

void StreamActiveSide::mapped_copy_done(StreamConnection& connection, Pending& pending) {
  pending.pin.reset();
  pending.transfer->mapped = true;
  chunk_done(connection, pending.transfer);
}

void StreamActiveSide::refused(StreamConnection& connection, const FrameHeader& header) {
  auto text = connection.receive_text(header.length);
  const Error why(error_code_from_wire(header.code),
                  "connection to " + connection.peer() +
                      " refused by the owner: " + (text ? *text : std::string("no reason given")));
  // The reason first: a transfer that starts on this connection from now on and finds it
  // closed says why (closed_ below turns new requests away without one).
  connection.shutdown(std::string("refused by the owner: ") + (text ? *text : ""));
  fail_all(std::nullopt, why);
}

void StreamActiveSide::fail_all(std::optional<Pending> taken, const Error& why) {
  std::unordered_map<std::uint64_t, Pending> lost;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    lost.swap(pending_);
    waiting_.store(0, std::memory_order_relaxed);
  }
  // Every pin goes before any transfer fails: fail() closes a gate, which waits for pins.
  if (taken) taken->pin.reset();
  for (auto& [id, pending] : lost) pending.pin.reset();
  if (taken) taken->transfer->transfer->fail(why);
  for (auto& [id, pending] : lost) pending.transfer->transfer->fail(why);
}

bool StreamActiveSide::idle() const {
  std::lock_guard lock(mutex_);
  return pending_.empty();
}

void StreamActiveSide::on_closed(StreamConnection&, const Error& reason) {
  fail_all(std::nullopt, reason);
}

}  // namespace memwire::detail
