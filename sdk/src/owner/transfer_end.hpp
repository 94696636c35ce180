#pragma once

#include <memory>
#include <optional>
#include <string>

#include "memwire/error.hpp"
#include "memwire/operation.hpp"
#include "pool/pool_state.hpp"
#include "pool/request_grant.hpp"

namespace memwire::detail {

// The end of a tagged pool transfer its owner admitted, on every transport, written here once:
// without `failure`, its tag is delivered once (a write's bytes are in the pool; a read's peer
// had them all), under its request grant when it was admitted under one (tracked by the grant:
// its release may have ended the transfer first, and then that is the answer). With `failure`,
// or when delivering fails (the queue's budget, a pool closed), the waits for its tag end with
// that error (under a grant, only where the grant leaves them to the transfer). An untagged
// transfer has nothing to deliver. Returns nullopt once delivered, else the error to answer the
// peer with.
std::optional<Error> end_admitted_transfer(PoolState& pool, const PoolState::Peer& peer,
                                           const std::string& tag, OperationKind kind,
                                           const std::shared_ptr<RequestGrant>& grant,
                                           std::optional<Error> failure);

}  // namespace memwire::detail
