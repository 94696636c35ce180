#pragma once

#include <chrono>
#include <string_view>

#include "memwire/metadata.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

// What a Registration serving a pool asks of it (pool/PoolState implements it): core calls it
// and never names the pool folder, which sits above core.
class PoolAccess {
 public:
  // Throws AccessDenied unless `token` is the pool's shared one (`shared_token`) or a live
  // grant's (Cancelled for a released request grant's).
  virtual void check_token(const Id128& token, const Id128& shared_token) const = 0;
  // check_token, then what the token allows for `kind` (the pool's options, a grant's access
  // and lease).
  virtual void authorize(const Id128& token, const Id128& shared_token,
                         OperationKind kind) const = 0;
  // Ends every wait (Cancelled, with `reason`), fails the pool's own transfers and waits up to
  // `grace` until none touches its memory.
  virtual void close(std::chrono::milliseconds grace, std::string_view reason) = 0;

 protected:
  ~PoolAccess() = default;  // owned as a PoolState, never through this interface
};

}  // namespace memwire::detail
