#include "transport/stream/stream_passive_side.hpp"

#include "core/registration.hpp"
#include "cuda/cuda_staging.hpp"
#include "owner/pool_facts.hpp"
#include "owner/pool_request.hpp"
#include "owner/transfer_claim.hpp"
#include "owner/transfer_end.hpp"
#include "pool/pool_state.hpp"
#include "transport/stream/request_plan.hpp"
#include "util/peer_name.hpp"

namespace memwire::detail {
std::shared_ptr<Registration> StreamPassiveSide::find(const FrameHeader& header) const {
  const bool pool = is_pool_request(header.type) || header.type == FrameType::PoolEnd;
  // The wire carries the low 32 bits of a pool's generation.
  return claimed_registration(*registrations_,
                              {header.key, pool, pool ? as_pool(header).generation : 0u, 32});
}

void StreamPassiveSide::count_fault(const FrameHeader& header) const {
  if (auto registration = registrations_->find(header.key)) detail::count_fault(*registration);
}

void StreamPassiveSide::fault(StreamConnection& connection, const FrameHeader& header,
                              FrameType answer_type, const std::string& what) {
  count_fault(header);
  refuse_malformed(connection, answer_type, header, what);
}

void StreamPassiveSide::answer(StreamConnection& connection, FrameType type,
                               const FrameHeader& request, const Error* error) {
  OutFrame frame;
  frame.header.type = type;
  frame.header.request_id = request.request_id;
  if (error != nullptr) {
    frame.header.code = wire_code(error->code());
    frame.text =
        std::string(error->message()).substr(0, FrameHeader::kMaxText);  // the code travels apart
  }
  connection.send(std::move(frame));
}

void StreamPassiveSide::touch(const std::shared_ptr<Registration>& registration) {
  if (registration->pool()) {
    // Not in touched_: a pool never completes, so it neither keeps the connection busy nor
    // fails when the connection goes. Its breaker goes when the connection does.
    if (pools_touched_.try_emplace(registration->key(), registration).second)
      registration->gate().add_breaker(reinterpret_cast<std::uintptr_t>(this),
                                       [weak = connection_] {
                                         if (auto connection = weak.lock())
                                           connection->shutdown("pool closed by its owner");
                                       });
    return;
  }
  // A pooled connection lives long: forget registrations that ended elsewhere.
  if (touched_.size() >= 256)
    std::erase_if(touched_, [](const auto& entry) {
      auto live = entry.second.lock();
      return !live || is_terminal(live->status());
    });
  if (touched_.try_emplace(registration->key(), registration).second) {
    registration->gate().add_breaker(reinterpret_cast<std::uintptr_t>(this), [weak = connection_] {
      if (auto connection = weak.lock()) connection->shutdown("registration revoked");
    });
  }
}

void StreamPassiveSide::on_frame(StreamConnection& connection, const FrameHeader& header) {
  // A peer that sent one small request often sends the next soon (a decode step's next block):
  // polling a while answers it without a wake-up (StreamOptions::busy_poll). Not after a large
  // one: its copy outlasts a wake-up many times, and on few CPUs the poll takes a CPU from the
  // copy (16 MiB through a SharedBuffer mapping, polling after every frame: 0.85-0.89x).
  if ((is_piece_request(header.type) || header.type == FrameType::ReadRequest ||
       header.type == FrameType::WriteRequest) &&
      header.length <= kMostBytesForWaiterToRead)
    connection.poll_after_a_lone_request();
  switch (header.type) {
    case FrameType::Hello:
      return serve_hello(connection, header);
    case FrameType::ReadRequest:
      return serve_read(connection, header);
    case FrameType::WriteRequest:
      return serve_write(connection, header);
    case FrameType::Notice:
      return serve_notice(connection, header);
    case FrameType::ReadPiecesRequest:
    case FrameType::WritePiecesRequest:
    case FrameType::PoolReadRequest:
    case FrameType::PoolWriteRequest:
      return serve_pieces(connection, header);
    case FrameType::PoolEnd:
      return serve_pool_end(connection, header);
    default:
      count_fault(header);
      connection.shutdown("protocol error: unexpected frame for the passive side");
  }
}

namespace {
// A GPU readable's stand-ins, filled before the first request that reads them (not one through
// CUDA IPC: that copies the device memory itself).
void fill_stand_ins(const Registration& reg, const void* at = nullptr, std::size_t n = 0) {
  if (const auto* staging = reg.staging(); staging != nullptr && reg.kind() == OperationKind::Read)
    staging->fill_host(at, n);  // waits for the chunks holding [at, at + n) alone
}
}  // namespace

SameHostOwner& StreamPassiveSide::same_host() const {
  if (!same_host_)
    throw Error(ErrorCode::Protocol, "cross-memory request from a peer of unknown process");
  // Every cross-memory act rests on the Hello's check of who sent it (serve_hello).
  if (!sender_checked_)
    throw Error(ErrorCode::Protocol,
                "cross-memory request on a connection whose Hello did not prove its sender");
  return *same_host_;
}

void StreamPassiveSide::serve_hello(StreamConnection& connection, const FrameHeader& header) {
  auto name = connection.receive_text(header.length);
  if (!name) return;
  if (auto problem = peer_name_problem(*name); !problem.empty())
    return refuse_malformed(connection, FrameType::HelloResponse, header,
                            "a Hello with " + std::string(problem));
  // A name is said once: a peer may not change who it says it is under transfers it opened.
  if (!peer_name_.empty())
    return refuse_malformed(connection, FrameType::HelloResponse, header, "a second Hello");
  peer_name_ = std::move(*name);
  // The dialler proves it is the process that connected: the kernel says who sent the Hello.
  const int sender = connection.sender_process();
  if (same_host_) connection.stop_reading_credentials();
  if ((header.flags & frame_flags::kCrossMemory) == 0) return;
  std::optional<Error> refused;
  try {
    if (!same_host_)
      throw Error(ErrorCode::Protocol, "cross-memory Hello from a peer of unknown process");
    same_host_->check_hello(header, sender);
    sender_checked_ = true;
  } catch (const Error& error) {
    refused = error;
  }
  if (refused) return answer(connection, FrameType::HelloResponse, header, &*refused);
  OutFrame accepted;
  accepted.header.type = FrameType::HelloResponse;
  accepted.header.request_id = header.request_id;
  if (same_host().offers_direct_reads()) accepted.header.flags = frame_flags::kDirectReads;
  connection.send(std::move(accepted));
}

void StreamPassiveSide::serve_read(StreamConnection& connection, const FrameHeader& header) {
  try {
    auto registration = find(header);
    auto access = registration->check_access(header.token, OperationKind::Read, header.index,
                                             header.offset, header.length, transport_);
    stand(connection, Standing::Shared);
    fill_stand_ins(*registration, access.data, header.length);
    touch(registration);
    registration->note_moved(header.length);
    OutFrame response;
    response.header.type = FrameType::ReadResponse;
    response.header.request_id = header.request_id;
    if (header.flags & frame_flags::kCrossMemory) {
      auto& host = same_host();
      if (host.answer_mapped(connection, header, access.data)) return;
      host.copy_to_peer(header.peer_address, access.data, header.length);
      response.header.flags = frame_flags::kCrossMemory;
      [[maybe_unused]] auto copied = std::move(access.pin);  // unpinned: completing waits for pins
    } else {
      // Pinned until the last byte is out.
      response.header.length = header.length;
      response.data = access.data;
      response.gate = &registration->gate();
      response.pin = std::move(access.pin);
      response.keep_alive = registration;
    }
    finish_request(connection, header, registration, std::move(response));
  } catch (const Error& error) {
    answer(connection, FrameType::ReadResponse, header, &error);
  }
}

void StreamPassiveSide::serve_write(StreamConnection& connection, const FrameHeader& header) {
  // Payload on the socket must be consumed whatever happens, or the framing is lost.
  const bool cross = (header.flags & frame_flags::kCrossMemory) != 0;
  std::uint64_t unread = cross ? 0 : header.length;
  try {
    auto registration = find(header);
    auto access = registration->check_access(header.token, OperationKind::Write, header.index,
                                             header.offset, header.length, transport_);
    stand(connection, Standing::Shared);
    touch(registration);
    registration->note_moved(header.length);
    if (!cross) {
      unread = 0;
      // Straight from the socket into the registration, pinned until the last byte landed.
      connection.receive_into(
          {{access.data, static_cast<std::size_t>(header.length)}},
          [this, &connection, header, registration, pin = std::move(access.pin)]() mutable {
            { auto landed = std::move(pin); }  // unpinned: completing waits for pins
            finish_request(connection, header, registration, write_response(header));
          });
      return;
    }
    auto& host = same_host();
    if (host.answer_mapped(connection, header, access.data)) return;
    host.copy_from_peer(header.peer_address, access.data, header.length);
    { auto copied = std::move(access.pin); }  // unpinned: completing waits for pins
    finish_request(connection, header, registration, write_response(header));
  } catch (const Error& error) {
    // Also what a cancelled piece request turns into on the wire (see frame_parts).
    refuse_after(connection, unread, FrameType::WriteResponse, header, error);
  }
}

OutFrame StreamPassiveSide::write_response(const FrameHeader& request) {
  OutFrame response;
  response.header.type = FrameType::WriteResponse;
  response.header.request_id = request.request_id;
  return response;
}

void StreamPassiveSide::refuse_after(StreamConnection& connection, std::uint64_t unread,
                                     FrameType type, const FrameHeader& request,
                                     const Error& error) {
  connection.discard(
      unread, [&connection, type, request, error] { answer(connection, type, request, &error); });
}

void StreamPassiveSide::refuse_malformed(StreamConnection& connection, FrameType type,
                                         const FrameHeader& request, const std::string& what) {
  const Error error(ErrorCode::Protocol, "protocol error: " + what);
  answer(connection, type, request, &error);
  connection.close_when_sent(std::chrono::seconds(1));
}

void StreamPassiveSide::serve_pieces(StreamConnection& connection, const FrameHeader& header) {
  const bool pool_frame = is_pool_request(header.type);
  const bool writing = is_write_request(header.type);
  const bool cross = (header.flags & frame_flags::kCrossMemory) != 0;
  const auto answer_type = writing ? FrameType::WriteResponse : FrameType::ReadResponse;
  const auto list_bytes = piece_list_bytes(header);
  if (list_bytes == 0)
    return fault(connection, header, answer_type,
                 std::to_string(header.index) + " pieces in a request (1 to " +
                     std::to_string(kMaxFramePieces) + ")");
  if (piece_request_inline_bytes(header) == 0)
    return fault(connection, header, answer_type,
                 "a tag of " + std::to_string(as_pool(header).tag_bytes) + " bytes (at most " +
                     std::to_string(kMaxFrameTag) + ")");
  std::vector<FramePiece> pieces(header.index);
  if (!connection.receive(pieces.data(), list_bytes)) return;
  std::string tag;
  if (pool_frame) {
    tag.resize(as_pool(header).tag_bytes);
    if (!connection.receive(tag.data(), tag.size())) return;
  }
  if (!pieces_add_up(header, pieces))
    return fault(connection, header, answer_type,
                 "the pieces' lengths do not add up to the request's");
  if (pool_frame && (header.flags & frame_flags::kLastOfTransfer) != 0 && (!writing || tag.empty()))
    return fault(connection, header, answer_type,
                 "only a tagged pool write ends its transfer in its request");
  if (tag.find('\0') != std::string::npos)
    return fault(connection, header, answer_type, "a tag holding a NUL byte");
  const bool ipc = (header.flags & frame_flags::kCudaIpc) != 0;
  std::vector<FrameIpcAllocation> table(!ipc         ? 0
                                        : pool_frame ? as_pool(header).ipc_allocations
                                                     : header.ipc_allocations);
  if (ipc && !connection.receive(table.data(), table.size() * sizeof(FrameIpcAllocation))) return;
  if (ipc && !cross)
    return fault(connection, header, answer_type, "a CUDA IPC request that is not cross-memory");
  // A write's bytes on the socket must be consumed whatever happens, or the framing is lost.
  std::uint64_t unread = writing && !cross ? header.length : 0;
  try {
    auto registration = find(header);
    const auto kind = writing ? OperationKind::Write : OperationKind::Read;
    // A pool request's token, grant, blocks and the grant's pin: one step (the owner's floor).
    AdmittedPoolRequest admission;
    if (pool_frame)
      admission = admit_pool_request(*registration, header.token, kind, block_pieces(pieces));
    else
      registration->authorize(header.token, kind);
    // A pool's token other than its shared one is a grant's (the admission accepted it).
    stand(connection, pool_frame && header.token != registration->token() ? Standing::Granted
                                                                          : Standing::Shared);
    const auto grant = admission.grant;
    if (pool_frame && !tag.empty())
      open_tagged_transfer(connection, as_pool(header), registration, tag, grant);
    std::vector<iovec> memory;
    memory.reserve(pieces.size());
    for (const auto& piece : pieces)
      memory.push_back({registration->locate(piece.index, piece.offset, piece.length),
                        static_cast<std::size_t>(piece.length)});
    // Under a request grant, its release waits for these bytes (or cuts them off).
    std::optional<AccessGate::Pin> grant_pin;
    if (grant) grant_pin = pin_grant(grant, std::move(*admission.grant_pin));
    if (ipc || (pool_frame && gpu_memory(*registration)))
      return serve_gpu_pieces(connection, header, registration, pieces, table, std::move(memory),
                              unread, std::move(grant_pin));
    fill_stand_ins(*registration);
    OutFrame response;
    response.header.type = answer_type;
    response.header.request_id = header.request_id;
    auto pin = registration->admit(transport_);
    touch(registration);
    registration->note_moved(header.length);
    unread = 0;
    if (!cross) {
      if (writing) {
        // The bytes land straight in the blocks, pinned until the last one has.
        connection.receive_into(
            std::move(memory),
            [this, &connection, header, registration, pin = std::move(pin),
             grant_pin = std::move(grant_pin), response = std::move(response)]() mutable {
              {
                auto landed = std::move(pin);
                auto granted = std::move(grant_pin);
              }
              finish_request(connection, header, registration, std::move(response));
            });
        return;
      }
      // Straight from the registration into the socket, pinned until the last byte is out.
      response.header.length = header.length;
      response.pieces = std::move(memory);
      response.gate = &registration->gate();
      response.pin = std::move(pin);
      if (grant_pin) {
        // The grant's pin goes with the answer, once its last byte left.
        struct Held {
          std::shared_ptr<Registration> registration;
          std::shared_ptr<RequestGrant> grant;
          std::optional<AccessGate::Pin> pin;
        };
        response.keep_alive =
            std::make_shared<Held>(Held{registration, grant, std::move(grant_pin)});
      } else {
        response.keep_alive = registration;
      }
    } else {
      // Memory the peer may map: it copies the blocks itself, once this answer is out.
      if (same_host().answer_mapped_pieces(connection, header, *registration, grant != nullptr,
                                           memory))
        return;
      copy_pieces(header, pieces, memory, response);
      {  // unpinned: completing revokes, which waits for pins
        auto copied = std::move(pin);
        auto granted = std::move(grant_pin);
      }
    }
    finish_request(connection, header, registration, std::move(response));
  } catch (const Error& error) {
    // A refused request (counted by its admission) keeps its connection; its transfer delivers
    // no tag.
    if (pool_frame) transfers_.refuse(as_pool(header).transfer);
    if (error.code() == ErrorCode::Protocol)
      return fault(connection, header, answer_type, std::string(error.message()));
    refuse_after(connection, unread, answer_type, header, error);
  }
}

std::vector<iovec> StreamPassiveSide::peer_ranges(std::span<const FramePiece> pieces) {
  std::vector<iovec> theirs;
  theirs.reserve(pieces.size());
  for (const auto& piece : pieces)
    theirs.push_back(
        {reinterpret_cast<void*>(piece.peer_address), static_cast<std::size_t>(piece.length)});
  return theirs;
}

void StreamPassiveSide::copy_pieces(const FrameHeader& header, std::span<const FramePiece> pieces,
                                    std::vector<iovec>& memory, OutFrame& response) {
  const bool writing = is_write_request(header.type);
  const auto theirs = peer_ranges(pieces);
  if (writing) {
    same_host().copy_from_peer(theirs, memory);
  } else {
    same_host().copy_to_peer(theirs, memory);
  }
  if (!writing) response.header.flags = frame_flags::kCrossMemory;
}

void StreamPassiveSide::finish_request(StreamConnection& connection, const FrameHeader& request,
                                       const std::shared_ptr<Registration>& registration,
                                       OutFrame response) {
  if (registration->pool()) {
    // A tagged pool write that ends its transfer: its tag is delivered now that every byte
    // landed, before the answer, which then says both.
    if (request.type == FrameType::PoolWriteRequest &&
        (request.flags & frame_flags::kLastOfTransfer) != 0) {
      if (auto error = end_transfer(as_pool(request).transfer, std::nullopt)) {
        answer(connection, response.header.type, request, &*error);
        return;
      }
    }
    connection.send(std::move(response));
    return;
  }
  if ((request.flags & frame_flags::kCompletes) == 0) {
    connection.send(std::move(response));
    return;
  }
  // The whole transfer in one request: the answer doubles as the completion's acknowledgement.
  try {
    registration->claim_remote_completion(request.token);
  } catch (const Error& error) {
    answer(connection, response.header.type, request, &error);
    return;
  }
  touched_.erase(request.key);
  if (!response.pin) {
    connection.send(std::move(response));
    registration->finish_remote_completion();
    return;
  }
  // A read's bytes ride on the answer: the owner wakes once the last of them has left (this
  // thread sends them as the socket drains; completing now would wait for their pin).
  response.on_sent = [registration] { registration->finish_remote_completion(); };
  response.on_dropped = [registration, weak = connection.weak_from_this()] {
    // Dropped because the owner's own memory failed under the send: that is the reason.
    const auto connection = weak.lock();
    registration->abandon_remote_completion(
        connection && connection->closed_on_local_memory_fault()
            ? Error(ErrorCode::Transport, connection->send_failure())
            : Error(ErrorCode::PeerLost, "the connection closed before the read's bytes had left"));
  };
  connection.send(std::move(response));
}

void StreamPassiveSide::serve_notice(StreamConnection& connection, const FrameHeader& header) {
  // Counted before the refusal closes the connection.
  if (text_payload_problem(header.length)) count_fault(header);
  auto text = connection.receive_text(header.length);
  if (!text) return;
  try {
    auto registration = find(header);
    if (header.code == 0) {
      registration->complete_from_remote(
          header.token, [&] { answer(connection, FrameType::NoticeResponse, header, nullptr); });
      touched_.erase(header.key);
      return;
    }
    registration->fail_from_remote(header.token, Error(error_code_from_wire(header.code),
                                                       "the active side reported: " + *text));
    touched_.erase(header.key);
  } catch (const Error& error) {
    answer(connection, FrameType::NoticeResponse, header, &error);
    return;
  }
  answer(connection, FrameType::NoticeResponse, header, nullptr);
}

void StreamPassiveSide::rise(const StreamConnection& connection, Standing standing) {
  if (accepted_)
    if (auto refusal = accepted_->rise(connection, standing))
      throw Error(ErrorCode::Transport,
                  "refused by the owner: over its limit of connections " + *refusal);
  standing_ = standing;
}

std::string StreamPassiveSide::peer_name(const StreamConnection& connection) const {
  return peer_name_.empty() ? connection.peer() : peer_name_;
}

bool StreamPassiveSide::busy() const {
  for (const auto& [key, weak] : touched_)
    if (auto registration = weak.lock(); registration && !is_terminal(registration->status()))
      return true;
  return false;
}

void StreamPassiveSide::on_closed(StreamConnection& connection, const Error& reason) {
  ipc_mappings_ = {};  // the peer's allocations opened for it close with it
  auto pools = std::move(pools_touched_);
  // Each transfer open on it ends: its tag's waiters hear why, no one else's.
  for (auto& [id, transfer] : transfers_.take_all())
    if (auto registration = transfer.pool.lock())
      end_admitted_transfer(
          *registration->pool(), transfer.peer, transfer.tag, transfer.kind, transfer.grant,
          Error(ErrorCode::PeerLost, std::string("connection lost: ") + reason.what()));
  for (const auto& [key, weak] : pools)
    if (auto registration = weak.lock())
      registration->gate().remove_breaker(reinterpret_cast<std::uintptr_t>(this));
  for (const auto& [token, weak] : std::exchange(grants_touched_, {}))
    if (auto grant = weak.lock())
      grant->gate().remove_breaker(reinterpret_cast<std::uintptr_t>(this));
  auto touched = std::move(touched_);
  // The owner's own memory failed under a send: its fault, said as such.
  const Error failure = connection.closed_on_local_memory_fault()
                            ? Error(ErrorCode::Transport, std::string(reason.message()))
                            : Error(ErrorCode::PeerLost,
                                    std::string("the active side is gone (") + reason.what() + ")");
  for (auto& [key, weak] : touched)
    if (auto registration = weak.lock(); registration && !is_terminal(registration->status()))
      registration->fail(failure);
}

}  // namespace memwire::detail
