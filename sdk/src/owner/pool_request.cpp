#include "owner/pool_request.hpp"

#include "core/registration.hpp"
#include "memwire/error.hpp"

namespace memwire::detail {

AdmittedPoolRequest admit_pool_request(const Registration& registration, const Id128& token,
                                       OperationKind kind, std::span<const BlockPiece> pieces) {
  const auto& pool = *registration.pool();
  try {
    auto admission = pool.admit(token, registration.token(), kind, [&](const RequestGrant& grant) {
      for (const auto& piece : pieces)
        pool.check_granted(grant, piece.region, piece.offset, piece.length);
    });
    for (const auto& piece : pieces) pool.check_blocks(piece.region, piece.offset, piece.length);
    return {std::move(admission.grant), std::move(admission.pin)};
  } catch (const Error& error) {
    count_if_refused(registration, error);
    throw;
  }
}

void count_if_refused(const Registration& registration, const Error& error) {
  // Asking for what the pool forbids: refused and counted, apart from protocol faults.
  if (registration.pool() && error.code() == ErrorCode::AccessDenied)
    registration.pool()->count_refusal();
}

PoolState::Peer requesting_peer(const Registration& registration, const Id128& token,
                                const std::shared_ptr<RequestGrant>& grant, std::string_view hello,
                                std::uint64_t connection) {
  // Under a grant, the peer is the one its admission found: no second lookup of the token.
  if (grant) return {grant->peer(), true, grant->request(), to_hex(grant->token())};
  return registration.pool()->identify(token, registration.token(), hello, connection);
}

void count_fault(const Registration& registration) {
  if (registration.pool()) registration.pool()->count_fault();
}

void open_under_grant(const std::shared_ptr<RequestGrant>& grant, const std::string& tag,
                      OperationKind kind) {
  if (grant) grant->opened({tag, kind});
}

}  // namespace memwire::detail
