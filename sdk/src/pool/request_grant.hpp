#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/access_gate.hpp"
#include "memwire/error.hpp"
#include "memwire/request_scope.hpp"
#include "memwire/status.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

// The owner's side of one request grant (Pool::grant): who may use its token, for which
// blocks, which access, until when; the requests landing under it (its gate, which release
// closes); the tagged transfers open under it, whose waits release ends; and what else must
// end with it (verbs windows bound for it).
// What a peer hears once the owner released request `request`'s blocks (with its reason).
std::string released_message(std::string_view request, std::string_view reason);
// What a peer hears once request `request`'s lease ended.
Error lease_over_error(std::string_view request);

class RequestGrant {
 public:
  // Tagged transfers open at once under one grant; one more is refused.
  static constexpr std::size_t kMostOpenTags = 4096;

  // `renew_limit`: the latest the lease may reach by renew() (expires_at: no renewal).
  RequestGrant(Id128 token, std::string peer, RequestScope scope,
               std::chrono::steady_clock::time_point expires_at,
               std::chrono::steady_clock::time_point renew_limit, std::chrono::milliseconds grace)
      : token_(token),
        peer_(std::move(peer)),
        scope_(std::move(scope)),
        expires_at_(expires_at.time_since_epoch().count()),
        renew_limit_(std::max(renew_limit, expires_at)),
        grace_(grace) {}

  const Id128& token() const noexcept { return token_; }
  const std::string& peer() const noexcept { return peer_; }
  const std::string& request() const noexcept { return scope_.request; }
  const RequestScope& scope() const noexcept { return scope_; }
  std::chrono::steady_clock::time_point expires_at() const noexcept {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(expires_at_.load(std::memory_order_acquire)));
  }
  std::chrono::steady_clock::time_point renew_limit() const noexcept { return renew_limit_; }
  // Moves the lease's end to now + `extension`, at most to renew_limit() and never earlier
  // than it was; returns the new end. A lease that is over stays over (the fence is final):
  // throws released_error() or Expired then.
  std::chrono::steady_clock::time_point renew(std::chrono::milliseconds extension);

  // Throws why it admits nothing now (released: Cancelled; lease over: Expired), or why it
  // does not allow `kind` (AccessDenied).
  void check(OperationKind kind) const;
  bool lease_over() const noexcept { return std::chrono::steady_clock::now() >= expires_at(); }
  // Throws AccessDenied unless blocks [first, first + count) lie in one granted run.
  void check_blocks(std::uint64_t first, std::uint64_t count) const;
  // Held while a request's bytes land in (or leave) its blocks; empty once released.
  std::optional<AccessGate::Pin> pin() { return gate_.pin(); }
  AccessGate& gate() noexcept { return gate_; }

  // A tagged transfer admitted under it (its first request); its kind says which waits its
  // end may end.
  using OpenTag = std::pair<std::string, OperationKind>;
  void opened(const OpenTag& tag);
  // Its tag's last step: `deliver` runs under the grant's lock unless it was released (then
  // the error to answer with). `deliver` may throw: the transfer is closed either way.
  std::optional<Error> finish(const OpenTag& tag, const std::function<void()>& deliver);
  // It failed otherwise: true when it was still open (its waits are the caller's to end);
  // false when release() took it (and ended them).
  bool closed(const OpenTag& tag);

  // Ends it; returns the tags of the transfers open under it (their waits are the caller's to
  // end), or nothing when it had ended already. Closes the gate (waits for requests landing,
  // up to the grace, then breaks their connections) and runs the hooks; a second call returns
  // once the first is through, so that no call returns before the requests are in. An owner's
  // thread calls it, never a transport's. `lease_over`: the lease's end releases it (its peer
  // hears Expired).
  std::optional<std::vector<OpenTag>> release(std::string_view reason, bool lease_over = false);
  bool released() const;
  // The error a released grant's peer hears: Cancelled with the owner's reason, or Expired
  // once the lease's end released it.
  Error released_error() const;
  // Runs `hook` when the grant is released (at once when it is already).
  void on_release(std::function<void()> hook);

 private:
  const Id128 token_;
  const std::string peer_;
  const RequestScope scope_;
  // steady_clock ticks: renew() moves it while transports read it.
  std::atomic<std::chrono::steady_clock::rep> expires_at_;
  const std::chrono::steady_clock::time_point renew_limit_;
  const std::chrono::milliseconds grace_;
  AccessGate gate_;
  mutable std::mutex mutex_;
  bool released_ = false;
  bool expired_ = false;    // released by the lease's end
  bool hooks_ran_ = false;  // and the release is through
  std::condition_variable ended_;
  std::string reason_;
  std::map<OpenTag, std::size_t> open_tags_;  // (tag, kind) -> transfers open with it
  std::vector<std::function<void()>> hooks_;
};

}  // namespace memwire::detail
