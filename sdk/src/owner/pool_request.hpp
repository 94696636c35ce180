#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/access_gate.hpp"
#include "memwire/error.hpp"
#include "memwire/operation.hpp"
#include "pool/pool_state.hpp"
#include "pool/request_grant.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

class Registration;

// Bytes [offset, offset + length) of a pool's region `region`, as a peer's request names them.
struct BlockPiece {
  std::uint32_t region = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// What admitting one pool request gives (admit_pool_request): under a request grant's token,
// the grant and the pin that holds its release until the request's bytes are in (or out).
struct AdmittedPoolRequest {
  std::shared_ptr<RequestGrant> grant;
  std::optional<AccessGate::Pin> grant_pin;
};

// The owner's admission of one request of a pool's transfer, on every transport, written here
// once: `token` (the shared one, a peer grant's or a request grant's) allows `kind`, and every
// piece lies in the pool's blocks and, under a request grant, in that grant's; the grant found
// and pinned in one step under the pool's lock (PoolState::admit), so a release either comes
// first and refuses the request or waits for its bytes. `registration`: a pool's, as
// claimed_registration found it. Throws the refusal to answer with; an AccessDenied is counted
// as the pool's refusal (Pool::refusals()).
AdmittedPoolRequest admit_pool_request(const Registration& registration, const Id128& token,
                                       OperationKind kind, std::span<const BlockPiece> pieces);

// Who sent an admitted request, for its tag's notification: its request grant's peer, or the
// pool's word for its token (a peer grant's name, or under the shared token the name its Hello
// chose, `hello`, on connection `connection`).
PoolState::Peer requesting_peer(const Registration& registration, const Id128& token,
                                const std::shared_ptr<RequestGrant>& grant, std::string_view hello,
                                std::uint64_t connection);

// A refusal of what the pool forbids (AccessDenied, asked of a pool's registration) counts as the
// pool's refusal (Pool::refusals()), on every transport; any other error is not one.
void count_if_refused(const Registration& registration, const Error& error);

// A frame the protocol forbids, naming a pool's registration, counts as the pool's fault
// (Pool::peer_faults()), on every transport; a one-shot operation's counts nowhere.
void count_fault(const Registration& registration);

// A tagged transfer admitted under `grant` (null: none) opens under it: the grant's release
// ends the waits for its tag. Throws when the grant was released meanwhile.
void open_under_grant(const std::shared_ptr<RequestGrant>& grant, const std::string& tag,
                      OperationKind kind);

}  // namespace memwire::detail
