// The owner's side of tagged pool transfers over a stream: the transfer a tagged request opens
// (its admission is the owner's floor's, owner/pool_request.hpp) and its end on PoolEnd, which
// delivers the tag once or fails it (owner/transfer_end.hpp).
#include "core/registration.hpp"
#include "owner/transfer_end.hpp"
#include "transport/stream/stream_passive_side.hpp"

namespace memwire::detail {

std::vector<BlockPiece> StreamPassiveSide::block_pieces(std::span<const FramePiece> pieces) {
  std::vector<BlockPiece> blocks;
  blocks.reserve(pieces.size());
  for (const auto& piece : pieces) blocks.push_back({piece.index, piece.offset, piece.length});
  return blocks;
}

void StreamPassiveSide::open_tagged_transfer(const StreamConnection& connection,
                                             const PoolFrameHeader& header,
                                             const std::shared_ptr<Registration>& registration,
                                             const std::string& tag,
                                             const std::shared_ptr<RequestGrant>& grant) {
  const auto kind =
      header.type == FrameType::PoolReadRequest ? OperationKind::Read : OperationKind::Write;
  auto peer = requesting_peer(*registration, header.token, grant, peer_name(connection), serial_);
  if (transfers_.admit(header.transfer,
                       {header.key, kind, tag, std::move(peer), registration, false, grant}) &&
      grant) {
    try {
      open_under_grant(grant, tag, kind);  // its release ends this transfer's waits
    } catch (const Error&) {
      transfers_.take(header.transfer);
      transfers_.ended(header.transfer, AdmittedTransfers::Outcome::Failed, true);
      throw;
    }
  }
}

void StreamPassiveSide::serve_pool_end(StreamConnection& connection, const FrameHeader& header) {
  // Counted before the refusal closes the connection.
  if (text_payload_problem(header.length)) count_fault(header);
  auto text = connection.receive_text(header.length);
  if (!text) return;
  const auto end = as_pool(header);
  const auto id = std::to_string(end.transfer);
  const auto* transfer = transfers_.find(end.transfer);
  if (transfer == nullptr) {
    switch (transfers_.outcome(end.transfer)) {
      case AdmittedTransfers::Outcome::Unknown:
        // A failure of a transfer never admitted (refused, or cancelled before its first
        // request left) ends no wait; a tag for one is forged.
        if (header.code != 0) {
          transfers_.ended(end.transfer, AdmittedTransfers::Outcome::Failed, false);
          return answer(connection, FrameType::NoticeResponse, header, nullptr);
        }
        return fault(connection, header, FrameType::NoticeResponse,
                     "a PoolEnd for transfer " + id +
                         ", which no tagged request admitted on this connection opened");
      case AdmittedTransfers::Outcome::Delivered: {
        if (header.code == 0)
          return fault(connection, header, FrameType::NoticeResponse,
                       "a second tag for transfer " + id);
        // A cancel that came after the tag had left behind all its bytes: nothing to undo.
        const Error delivered(ErrorCode::Cancelled, "its tag was delivered already");
        return answer(connection, FrameType::NoticeResponse, header, &delivered);
      }
      case AdmittedTransfers::Outcome::Failed: {
        if (header.code != 0) return answer(connection, FrameType::NoticeResponse, header, nullptr);
        const Error refused(ErrorCode::Transport,
                            "a request of this transfer was refused: its tag was not delivered");
        return answer(connection, FrameType::NoticeResponse, header, &refused);
      }
    }
  }
  const auto registration = transfer->pool.lock();
  const auto peer = transfer->peer;
  const bool same_pool = end.key == transfer->key;
  if (!registration) {
    end_transfer(end.transfer, Error(ErrorCode::Cancelled, "the pool was closed by its owner"));
    const Error closed(ErrorCode::Cancelled, "the pool was closed by its owner");
    return answer(connection, FrameType::NoticeResponse, header, &closed);
  }
  std::optional<Error> failure;
  try {
    if (!same_pool || requesting_peer(*registration, end.token, nullptr, peer_name(connection),
                                      serial_) != peer) {
      end_transfer(end.transfer, Error(ErrorCode::Protocol, "its PoolEnd was not its own"));
      return fault(connection, header, FrameType::NoticeResponse,
                   "the PoolEnd of transfer " + id +
                       " names another pool or presents another peer's token than its requests");
    }
    if (header.code != 0)
      failure.emplace(error_code_from_wire(header.code), "the active side reported: " + *text);
  } catch (const Error& error) {
    failure = error;  // e.g. its grant was revoked meanwhile
  }
  auto refused = end_transfer(end.transfer, failure);
  answer(connection, FrameType::NoticeResponse, header,
         header.code != 0 || !refused ? nullptr : &*refused);
}

std::optional<Error> StreamPassiveSide::end_transfer(std::uint64_t id,
                                                     std::optional<Error> failure) {
  auto transfer = transfers_.take(id);
  if (!transfer) return Error(ErrorCode::Protocol, "no such transfer open");
  const bool granted = transfer->peer.authenticated;
  auto registration = transfer->pool.lock();
  if (!registration) {
    transfers_.ended(id, AdmittedTransfers::Outcome::Failed, granted);
    return Error(ErrorCode::Cancelled, "the pool was closed by its owner");
  }
  if (!failure && transfer->failed)
    failure.emplace(ErrorCode::Transport,
                    "a request of this transfer failed: its tag was not delivered");
  auto refused = end_admitted_transfer(*registration->pool(), transfer->peer, transfer->tag,
                                       transfer->kind, transfer->grant, std::move(failure));
  transfers_.ended(
      id, refused ? AdmittedTransfers::Outcome::Failed : AdmittedTransfers::Outcome::Delivered,
      granted);
  return refused;
}

}  // namespace memwire::detail
