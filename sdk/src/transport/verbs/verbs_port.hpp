#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "memwire/error.hpp"
#include "transport/verbs/verbs_connection.hpp"
#include "transport/verbs/verbs_wire.hpp"

namespace memwire::detail {
class Registration;
}

namespace memwire::detail::verbs {

struct Rail;

// What the two sides of the verbs protocol (VerbsActiveSide, VerbsPassiveSide) may ask of the
// engine that drives them, and no more: its rails and connections, opening and failing a
// connection, sending a notice, running work later, watching a grant's expiry. The engine
// implements it; a test implements it to drive a side without an RDMA device. Under the
// engine's work only, but for later()'s callable.
class VerbsPort {
 public:
  virtual ~VerbsPort() = default;

  virtual std::size_t rail_count() const noexcept = 0;
  virtual Rail& rail(std::size_t index) const noexcept = 0;
  virtual const std::map<rdma_cm_id*, std::shared_ptr<Connection>>& connections()
      const noexcept = 0;
  // The pooled connection to connector `peer` at `address` from local rail `rail`, opened now
  // if there is none. Throws Error.
  virtual std::shared_ptr<Connection> connect(const std::string& peer, const std::string& address,
                                              std::size_t rail) = 0;
  // Sends `notice` on `connection`; a post that fails fails the connection.
  virtual void send(Connection& connection, const Notice& notice) = 0;
  // Closes `connection` and fails everything that used it. `culprit` (a transfer whose own
  // work request failed) gets `culprit_error`; every other one gets `error`.
  virtual void fail_connection(Connection& connection, const Error& error,
                               std::optional<std::uint64_t> culprit = std::nullopt,
                               std::optional<Error> culprit_error = std::nullopt) = 0;
  // A callable for any thread: runs `work` on the progress thread if the engine is still there.
  virtual std::function<void()> later(std::function<void()> work) = 0;
  // Ends `grant` when `registration` expires (unless renewed by then).
  virtual void watch_expiry(const std::shared_ptr<Registration>& registration,
                            const std::shared_ptr<AccessGrant>& grant) = 0;
  // Ends `grant` when a request grant's lease ends: `lease_end_ms()` says when (unix ms), asked
  // again at that time, since a renewal may have moved it. A port without a timer ignores it.
  virtual void watch_lease(const std::shared_ptr<AccessGrant>& grant,
                           std::function<std::int64_t()> lease_end_ms) {
    (void)grant;
    (void)lease_end_ms;
  }
  // Closes `connection` at `deadline` (at once if past) if `grant` still has a window bind in
  // flight then: the bind waits behind work the peer stalls, and the window may be bound.
  virtual void close_if_bind_stalls(const std::shared_ptr<Connection>& connection,
                                    const std::shared_ptr<AccessGrant>& grant,
                                    std::chrono::steady_clock::time_point deadline) = 0;
  // The connector's remote keys, which every grant takes from.
  virtual const std::shared_ptr<KeyBudget>& key_budget() const noexcept = 0;

 protected:
  VerbsPort() = default;
  VerbsPort(const VerbsPort&) = default;
  VerbsPort& operator=(const VerbsPort&) = default;
};

}  // namespace memwire::detail::verbs
