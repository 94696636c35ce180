#include "transport/verbs/verbs_passive_side.hpp"

#include <algorithm>

#include "core/registration.hpp"
#include "memwire/clock.hpp"
#include "memwire/error_codes.hpp"
#include "owner/pool_request.hpp"
#include "owner/transfer_claim.hpp"
#include "owner/transfer_end.hpp"
#include "pool/grant_windows.hpp"
#include "pool/pool_state.hpp"
#include "transport/verbs/offered_access.hpp"
#include "transport/verbs/rail.hpp"
#include "transport/verbs/verbs_port.hpp"

namespace memwire::detail::verbs {
namespace {

// Registrations one connection may have begun at once: each holds memory windows (or regions)
// on the device, so a peer cannot pile them up.
constexpr std::size_t kMaxInboundPerConnection = 1024;
// Remote keys (memory windows or regions) one connection may hold at once: an operation may
// have up to 65,536 descriptors, and the device's windows are shared by every peer.
constexpr std::size_t kMaxKeysPerConnection = 65536;

// Who sent a tag: the connector its hello named, else the connection.
std::string peer_of(const Connection& connection) {
  return connection.peer.empty() ? describe(connection) : connection.peer;
}

}  // namespace

void VerbsPassiveSide::on_notice(Connection& connection, const Notice& notice) {
  switch (notice.type) {
    case NoticeType::Begin:
    case NoticeType::PoolBegin:
      on_begin(connection, notice);
      return;
    case NoticeType::Done:
    case NoticeType::PoolDone:
      on_done(connection, notice);
      return;
    case NoticeType::Abort:
    case NoticeType::PoolAbort:
      on_abort(connection, notice);
      return;
    case NoticeType::Accept:
    case NoticeType::Result:
    case NoticeType::Keys:
    case NoticeType::Credits:
      return;  // the active side's
  }
}

void VerbsPassiveSide::reply(Connection& connection, NoticeType type, std::uint64_t seq,
                             std::optional<ErrorCode> error, std::string text) {
  Notice notice;
  notice.type = type;
  notice.seq = seq;
  notice.error = error;
  notice.text = std::move(text);
  port_.send(connection, notice);
}

void VerbsPassiveSide::on_begin(Connection& connection, const Notice& notice) {
  std::shared_ptr<Registration> registration;
  try {
    registration = claimed_registration(
        *registrations_, {notice.key, notice.type == NoticeType::PoolBegin, notice.generation});
  } catch (const Error& error) {
    reply(connection, NoticeType::Accept, notice.seq, error.code(), std::string(error.message()));
    return;
  }
  try {
    registration->check_token(notice.token);
  } catch (const Error& error) {
    reply(connection, NoticeType::Accept, notice.seq, error.code(), std::string(error.message()));
    return;
  }
  try {
    // Kind, expiry and liveness, before a byte moves. The pin is dropped at once: the device
    // moves the bytes and the memory regions are what guards the memory.
    const auto& descriptors = registration->descriptors();
    registration->check_access(notice.token, notice.kind, 0, 0, descriptors.front().size(),
                               "verbs");
  } catch (const Error& error) {
    // Refused before it was admitted: the sender hears why; no waiter's tag was its to end.
    count_if_refused(*registration, error);
    reply(connection, NoticeType::Accept, notice.seq, error.code(), std::string(error.message()));
    return;
  }
  if (registration->pool()) return on_pool_begin(connection, notice, registration);
  // Refused before any key is granted, as Done would be after the bytes moved. The token was
  // right, so the owner hears of it too, as it would of the reader's failure on the other
  // transports.
  if (notice.bytes != registration->registered_bytes()) {
    const Error partial(ErrorCode::InvalidArgument,
                        "the transfer would move " + std::to_string(notice.bytes) + " of the " +
                            std::to_string(registration->registered_bytes()) +
                            " bytes this operation registered: a read or write of part of an "
                            "operation does not complete it");
    reply(connection, NoticeType::Accept, notice.seq, partial.code(),
          std::string(partial.message()));
    registration->fail(partial);
    return;
  }
  if (connection.inbound.contains(notice.key)) {
    reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Protocol,
          "this connection already began the operation");
    return;
  }
  if (refused_as_full(connection, notice)) return;
  std::size_t keys = registration->descriptors().size();
  for (const auto& [key, entry] : connection.inbound) keys += entry.grant->rkeys().size();
  if (keys > kMaxKeysPerConnection) {
    reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Transport,
          "too many remote keys held on one connection (" + std::to_string(kMaxKeysPerConnection) +
              "): finish some operations first");
    return;
  }
  // Keys for this connection's QP alone, made now that the token checked out.
  auto grant = grant_to(connection, notice, *registration);
  if (!grant) return;
  // Remembered so that losing this connection fails the operation and ends the grant.
  connection.inbound[notice.key] = {registration, grant, {}};
  port_.watch_expiry(registration, grant);
  send_grant(connection, notice.seq, grant);
}

bool VerbsPassiveSide::refused_as_full(Connection& connection, const Notice& notice) {
  if (connection.inbound.size() < kMaxInboundPerConnection) return false;
  reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Transport,
        "too many operations begun on one connection (" + std::to_string(kMaxInboundPerConnection) +
            ")");
  return true;
}

void VerbsPassiveSide::send_grant(Connection& connection, std::uint64_t seq,
                                  const std::shared_ptr<AccessGrant>& grant, bool bind) {
  if (!connection.send_grant(seq, grant, bind))
    port_.fail_connection(
        connection,
        Error(ErrorCode::Transport, "verbs: cannot post to the QP of " + describe(connection)));
}

std::shared_ptr<AccessGrant> VerbsPassiveSide::grant_to(Connection& connection,
                                                        const Notice& notice,
                                                        Registration& registration) {
  try {
    auto access = registration.attachment<OfferedAccess>();
    if (!access) throw Error(ErrorCode::Cancelled, "the operation ended on the owner's side");
    // A one-shot Begin names its transfer, the same on each of its rails; the claim on this
    // rail is this connection's.
    const auto claimant =
        registration.pool() ? std::string() : peer_of(connection) + "/" + notice.text;
    auto grant = access->grant(registration, connection.rail, port_.rail(connection.rail).device,
                               connection.own_protection_domain(), claimant, connection.serial);
    close_on_stalled_bind(connection, grant);
    return grant;
  } catch (const Error& error) {
    reply(connection, NoticeType::Accept, notice.seq, error.code(), std::string(error.message()));
    return nullptr;
  }
}

void VerbsPassiveSide::close_on_stalled_bind(Connection& connection,
                                             const std::shared_ptr<AccessGrant>& grant) {
  const auto found = port_.connections().find(connection.id());
  if (found == port_.connections().end()) return;
  grant->on_stalled_bind(
      port_.later([this, weak = std::weak_ptr(found->second), held = std::weak_ptr(grant)] {
        const auto connection = weak.lock();
        const auto grant = held.lock();
        if (connection && grant)
          port_.close_if_bind_stalls(connection, grant, grant->close_deadline());
      }));
}

std::shared_ptr<AccessGrant> VerbsPassiveSide::grant_request(
    Connection& connection, const Notice& notice, Registration& registration,
    const std::shared_ptr<RequestGrant>& request) {
  try {
    auto access = registration.attachment<OfferedAccess>();
    if (!access) throw Error(ErrorCode::Cancelled, "the pool was closed by its owner");
    // A window per run of granted blocks, bound on this QP: the NIC refuses the rest.
    std::vector<AccessGrant::Range> ranges;
    for (const auto& window : grant_windows(registration.pool()->metadata(), request->scope()))
      ranges.push_back({window.region, window.offset, window.length});
    const auto kind = request->scope().access == Access::Read    ? OperationKind::Read
                      : request->scope().access == Access::Write ? OperationKind::Write
                                                                 : OperationKind::Unspecified;
    auto grant =
        access->grant_ranges(registration, connection.rail, port_.rail(connection.rail).device,
                             connection.own_protection_domain(), ranges, kind);
    close_on_stalled_bind(connection, grant);
    // Released: the windows go (AccessGrant::invalidate); the lease: the engine's timer.
    request->on_release([held = std::weak_ptr(grant)] {
      if (auto grant = held.lock()) grant->invalidate();
    });
    port_.watch_lease(grant, [held = std::weak_ptr(request)]() -> std::int64_t {
      const auto request = held.lock();
      if (!request || request->lease_over()) return 0;  // gone (released) or over
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          request->expires_at() - std::chrono::steady_clock::now());
      return unix_now_ms() + std::max<std::int64_t>(0, left.count());
    });
    return grant;
  } catch (const Error& error) {
    reply(connection, NoticeType::Accept, notice.seq, error.code(), std::string(error.message()));
    return nullptr;
  }
}

void VerbsPassiveSide::on_pool_begin(Connection& connection, const Notice& notice,
                                     const std::shared_ptr<Registration>& registration) {
  Connection::Inbound::PoolTransfer transfer{notice.tag, {}, false, {}, {}, OperationKind::Write};
  try {
    const auto peer = requesting_peer(*registration, notice.token, nullptr, peer_of(connection),
                                      connection.serial);
    transfer.peer = peer.name;
    transfer.authenticated = peer.authenticated;
    transfer.request = peer.request;
    transfer.token = peer.token;
    transfer.kind = notice.kind == OperationKind::Read ? OperationKind::Read : OperationKind::Write;
  } catch (const Error& error) {
    reply(connection, NoticeType::Accept, notice.seq, error.code(), std::string(error.message()));
    return;
  }
  // A request grant's keys are its own: held by this connection under its token, not the
  // pool's key, and bound over its blocks alone.
  const auto request = registration->pool()->request_grant(notice.token);
  if (!request && !transfer.request.empty()) {
    // Released since identify() found its token: never the pool-wide keys in its stead.
    reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Cancelled,
          released_message(transfer.request, {}));
    return;
  }
  const auto entry_key = request ? notice.token : notice.key;
  auto found = connection.inbound.find(entry_key);
  if (found != connection.inbound.end()) {
    auto& entry = found->second;
    if (entry.pool_transfers.size() >= kMaxInboundPerConnection) {
      reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Transport,
            "too many transfers of one pool under way on one connection (" +
                std::to_string(kMaxInboundPerConnection) + ")");
      return;
    }
    if (entry.grant->invalidated()) {
      if (request && request->lease_over())
        reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Expired,
              "the lease on the blocks of request " + request->request() + " ended");
      else
        reply(connection, NoticeType::Accept, notice.seq, ErrorCode::Cancelled,
              "the pool was closed by its owner");
      return;
    }
    entry.pool_transfers[notice.seq] = std::move(transfer);
    // The keys this connection holds already: no bind, no new region.
    send_grant(connection, notice.seq, entry.grant, /*bind=*/false);
    return;
  }
  if (refused_as_full(connection, notice)) return;
  auto grant = request ? grant_request(connection, notice, *registration, request)
                       : grant_to(connection, notice, *registration);
  if (!grant) return;
  auto& entry = connection.inbound[entry_key];
  entry = {registration, grant, {}};
  entry.pool_transfers[notice.seq] = std::move(transfer);
  send_grant(connection, notice.seq, grant);
}

void VerbsPassiveSide::on_pool_done(Connection& connection, const Notice& notice,
                                    Registration& registration) {
  // A request grant's keys are held under its token.
  auto found = connection.inbound.find(notice.token);
  if (found == connection.inbound.end()) found = connection.inbound.find(notice.key);
  // A transfer under keys the connection held already had no PoolBegin: its PoolDone names its
  // tag; one that began must name the tag its PoolBegin did.
  const bool begun =
      found != connection.inbound.end() && found->second.pool_transfers.contains(notice.seq);
  if (found == connection.inbound.end()) {
    count_fault(registration);
    reply(connection, NoticeType::Result, notice.seq, ErrorCode::Protocol,
          "PoolDone for a pool this connection holds no keys for");
    return;
  }
  Connection::Inbound::PoolTransfer transfer{notice.tag, {}, false, {}, {}, OperationKind::Write};
  if (begun) {
    transfer = std::move(found->second.pool_transfers[notice.seq]);
    found->second.pool_transfers.erase(notice.seq);
  }
  try {
    if (transfer.tag != notice.tag)
      throw Error(ErrorCode::Protocol, "a PoolDone naming another tag than its PoolBegin");
    if (notice.generation != registration.pool()->generation())
      throw Error(ErrorCode::Expired, "a PoolDone of another generation of the pool");
    // A transfer under held keys had no PoolBegin to check its kind: the pool must allow it.
    registration.authorize(notice.token, notice.kind);
    const auto peer = requesting_peer(registration, notice.token, nullptr, peer_of(connection),
                                      connection.serial);
    if (begun && (peer.name != transfer.peer || peer.authenticated != transfer.authenticated))
      throw Error(ErrorCode::Protocol, "a Done presenting another peer's token than its Begin");
    // The device placed every byte before this SEND, which came after them on the same QP.
    if (auto refused = end_admitted_transfer(*registration.pool(), peer, transfer.tag, notice.kind,
                                             nullptr, std::nullopt))
      throw *refused;
  } catch (const Error& error) {
    if (error.code() == ErrorCode::Protocol) count_fault(registration);
    reply(connection, NoticeType::Result, notice.seq, error.code(), std::string(error.message()));
    return;
  }
  reply(connection, NoticeType::Result, notice.seq);
}

void VerbsPassiveSide::on_done(Connection& connection, const Notice& notice) {
  // The peer is done with its keys: its grant here ends whatever comes of the Done.
  const auto end_grant = [&] {
    if (auto found = connection.inbound.find(notice.key); found != connection.inbound.end()) {
      found->second.grant->invalidate();
      connection.inbound.erase(found);
    }
  };
  auto registration = registrations_->find(notice.key);
  // A reader that completed on its own READs (kDoneWithoutResult) waits for no answer.
  const bool answer = notice.first_index != kDoneWithoutResult;
  if (!registration) {
    if (answer)
      reply(connection, NoticeType::Result, notice.seq, ErrorCode::Cancelled,
            "the operation ended on the owner's side before the transfer completed");
    end_grant();
    return;
  }
  if (static_cast<bool>(registration->pool()) != (notice.type == NoticeType::PoolDone)) {
    count_fault(*registration);
    reply(connection, NoticeType::Result, notice.seq, ErrorCode::Protocol,
          registration->pool() ? "a pool's transfers end with PoolDone"
                               : "PoolDone for a one-shot operation");
    return;
  }
  if (registration->pool()) return on_pool_done(connection, notice, *registration);
  // Every grant of the operation (on every rail the transfer began on) ends before the Result
  // is posted: a reader holding its answer holds no working key. The Result is posted before
  // the owner wakes: an owner that exits at once must not take the answer down with it.
  bool answered = false;
  try {
    // The device moved the bytes unseen: the active side's count is all there is to check,
    // and only a holder of the token may make it.
    registration->check_token(notice.token);
    registration->note_moved(notice.bytes);
    registration->complete_from_remote(notice.token, [&] {
      if (auto offered = registration->attachment<OfferedAccess>()) offered->revoke();
      answered = true;
      if (answer) reply(connection, NoticeType::Result, notice.seq);
    });
    for (const auto& [id, other] : port_.connections()) other->inbound.erase(notice.key);
  } catch (const Error& error) {
    if (!answered && answer)
      reply(connection, NoticeType::Result, notice.seq, error.code(), std::string(error.message()));
  }
  end_grant();
}

void VerbsPassiveSide::on_abort(Connection& connection, const Notice& notice) {
  // Only the connection that began the operation may fail it.
  auto found = connection.inbound.find(notice.token);
  if (found == connection.inbound.end()) found = connection.inbound.find(notice.key);
  if (found == connection.inbound.end()) return;
  auto registration = found->second.registration.lock();
  if (registration &&
      static_cast<bool>(registration->pool()) != (notice.type == NoticeType::PoolAbort))
    return;  // a pool's transfers fail with PoolAbort, an operation's with Abort
  if (registration && registration->pool()) {
    // One transfer of the pool failed: its tag's waiters hear it; the grant stays.
    auto transfer = found->second.pool_transfers.find(notice.seq);
    std::string tag = notice.tag;  // one without PoolBegin names its tag
    // Which waits it may end: its Begin's kind, else the abort's (a write's when it names none).
    auto kind = notice.kind == OperationKind::Read ? OperationKind::Read : OperationKind::Write;
    if (transfer != found->second.pool_transfers.end()) {
      tag = std::move(transfer->second.tag);
      kind = transfer->second.kind;
      found->second.pool_transfers.erase(transfer);
    }
    PoolState::Peer peer;
    try {
      peer = requesting_peer(*registration, notice.token, nullptr, peer_of(connection),
                             connection.serial);
    } catch (const Error&) {
      return;
    }
    end_admitted_transfer(
        *registration->pool(), peer, tag, kind, nullptr,
        Error(notice.error.value_or(ErrorCode::Protocol),
              "the active side failed (" +
                  std::string(error_code_name(notice.error.value_or(ErrorCode::Protocol))) + ")"));
    return;
  }
  // The grant ends with the entry (once a bind still queued on the device has run).
  found->second.grant->invalidate();
  connection.inbound.erase(found);
  if (!registration) return;
  try {
    registration->fail_from_remote(notice.token, Error(notice.error.value_or(ErrorCode::Protocol),
                                                       "the active side failed: " + notice.text));
  } catch (const Error&) {
    // A wrong token changes nothing.
  }
}

void VerbsPassiveSide::on_connection_lost(const std::map<Id128, Connection::Inbound>& inbound,
                                          const Error& error) {
  const auto& connections = port_.connections();
  for (const auto& [registration_key, entry] : inbound) {
    if (auto registration = entry.registration.lock(); registration && registration->pool()) {
      // A pool never fails with a connection; the tags of its transfers under way do.
      for (const auto& [seq, transfer] : entry.pool_transfers)
        end_admitted_transfer(
            *registration->pool(),
            {transfer.peer, transfer.authenticated, transfer.request, transfer.token}, transfer.tag,
            transfer.kind, nullptr,
            Error(ErrorCode::PeerLost, "connection lost: " + std::string(error.what())));
      continue;
    }
    const auto& key = registration_key;  // a plain reference: lambdas cannot capture a binding
    const bool held = std::any_of(connections.begin(), connections.end(), [&](const auto& entry) {
      return entry.second->state != Connection::State::Closed &&
             entry.second->inbound.contains(key);
    });
    if (held) continue;
    if (auto registration = entry.registration.lock())
      registration->fail(Error(ErrorCode::PeerLost, error.code() == ErrorCode::PeerLost
                                                        ? std::string(error.message())
                                                        : std::string(error.what())));
  }
}

}  // namespace memwire::detail::verbs
