#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "memwire/export.hpp"
#include "memwire/pool.hpp"

namespace memwire {

namespace detail {
class Registration;
class RequestGrant;
}  // namespace detail

// One peer's access to some blocks of a pool for one request, until a deadline (the lease):
// what Pool::grant returns. Its metadata is the only key to those blocks for that request; the
// owner (tcp, shm) or the NIC (verbs: memory windows bound to exactly those blocks on the
// peer's QP) refuses a transfer outside them, after close(), or after the lease, before any
// byte lands. A held thing: ended by close(reason) or by dropping it. Move-only.
//
// The fence: once close() returns, or expired() returned true, no byte lands under the grant,
// on any transport. Not before: a request admitted just before expires_at() may still be
// landing after it; expired() is how the owner learns that it is in and that the blocks are
// its own again.
class [[nodiscard("dropping it releases the blocks at once")]] MEMWIRE_API BlockGrant {
 public:
  BlockGrant(BlockGrant &&) noexcept;
  BlockGrant& operator=(BlockGrant&&) noexcept;
  BlockGrant(const BlockGrant&) = delete;
  BlockGrant& operator=(const BlockGrant&) = delete;
  ~BlockGrant();

  // For the peer: the pool's metadata with this grant's own token and its scope.
  const PoolMetadata& metadata() const noexcept { return *metadata_; }
  const std::string& peer() const noexcept;
  const std::string& request() const noexcept;
  std::chrono::steady_clock::time_point expires_at() const noexcept;
  // The latest the lease may reach by renew(): the grant's making plus Pool::grant's max_lease.
  std::chrono::steady_clock::time_point renew_limit() const noexcept;
  // A heartbeat: the lease now ends at now + `extension`, at most at renew_limit() and never
  // earlier than it did; returns the new end. A lease that ended stays ended, the fence is
  // final: Error{Expired} once it is over (whether or not expired() was called),
  // Error{Cancelled} once closed; extension <= 0 is Error{InvalidArgument}. On verbs the
  // windows stay bound (the NIC's timer follows the new end).
  std::chrono::steady_clock::time_point renew(std::chrono::milliseconds extension);

  // Ends the grant: from now on its token is refused ("blocks released by the owner for request
  // X", with `reason` when given), requests under way finish landing (or their connection is
  // cut after the pool's grace) before this returns, the waits for the tags of its open
  // transfers end with Error{Cancelled}, and on verbs its windows are invalidated. The blocks
  // are the owner's again once it returns. Idempotent; dropping the grant does the same.
  void close(std::string_view reason = {});
  // True once closed, or moved from.
  bool closed() const noexcept;
  // Whether the lease is over, as the fence: false before expires_at(); after it, ends the
  // grant as close() does (its peer then hears Error{Expired}: "the lease on the blocks of
  // request X ended") and returns true once every request admitted before the end has landed
  // (or had its connection cut after the pool's grace), and on verbs its windows are
  // invalidated: from then on no byte lands under the grant. Poll it, or sleep until
  // expires_at() and call it. True when moved from.
  bool expired();

 private:
  friend class Pool;
  BlockGrant(std::shared_ptr<detail::RequestGrant> grant, PoolMetadata metadata);
  void end(std::string_view reason, bool lease_over);  // close() and expired()
  std::shared_ptr<detail::RequestGrant> grant_;
  std::weak_ptr<detail::Registration> pool_;  // releases through it while it lives
  std::unique_ptr<PoolMetadata> metadata_;
};

}  // namespace memwire
