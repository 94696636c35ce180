#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/registration_table.hpp"
#include "memwire/error.hpp"
#include "pool/request_grant.hpp"
#include "transport/verbs/verbs_connection.hpp"
#include "transport/verbs/verbs_wire.hpp"
#include "util/ids.hpp"

namespace memwire::detail::verbs {

class VerbsPort;

// The passive (owner's) side of the verbs protocol: the owner checks Begin against the live
// registration and grants that connection alone remote keys for it (the device then serves
// the RDMA itself, and refuses every other QP); it ends the grant and completes the
// registration on Done (answering with Result), and fails it on Abort or when the connections
// that began it are lost. Runs under the engine's work (its progress thread, or a waiter that
// took it).
class VerbsPassiveSide {
 public:
  VerbsPassiveSide(VerbsPort& port, std::shared_ptr<RegistrationTable> registrations)
      : port_(port), registrations_(std::move(registrations)) {}

  // Begin, Done or Abort from an active side.
  void on_notice(Connection& connection, const Notice& notice);
  // `inbound`: the registrations the closed connection had begun. Each fails unless another
  // live connection (the peer's other rail) still carries its transfer.
  // A pool's transfers under way end, each named to its waiters with the peer that began it.
  void on_connection_lost(const std::map<Id128, Connection::Inbound>& inbound, const Error& error);

 private:
  void on_begin(Connection& connection, const Notice& notice);
  // Keys of `registration` for this connection alone; null once Accept said why not.
  std::shared_ptr<AccessGrant> grant_to(Connection& connection, const Notice& notice,
                                        Registration& registration);
  // Keys of a request grant for this connection alone: a window per run of its blocks.
  std::shared_ptr<AccessGrant> grant_request(Connection& connection, const Notice& notice,
                                             Registration& registration,
                                             const std::shared_ptr<RequestGrant>& request);
  // A bind that stalls when `grant` ends closes this connection (AccessGrant::invalidate).
  void close_on_stalled_bind(Connection& connection, const std::shared_ptr<AccessGrant>& grant);
  // A pool's Begin: its keys granted to this connection once, then answered from that grant.
  void on_pool_begin(Connection& connection, const Notice& notice,
                     const std::shared_ptr<Registration>& registration);
  void on_pool_done(Connection& connection, const Notice& notice, Registration& registration);
  void on_done(Connection& connection, const Notice& notice);
  void on_abort(Connection& connection, const Notice& notice);
  void reply(Connection& connection, NoticeType type, std::uint64_t seq,
             std::optional<ErrorCode> error = std::nullopt, std::string text = {});
  // True, once Accept refused it, when a Begin would hold more operations on the connection than
  // it may (kMaxInboundPerConnection).
  bool refused_as_full(Connection& connection, const Notice& notice);
  // Sends the keys of `grant` in answer to Begin `seq` (`bind`: bind its windows first); a QP
  // that takes no post fails the connection.
  void send_grant(Connection& connection, std::uint64_t seq,
                  const std::shared_ptr<AccessGrant>& grant, bool bind = true);

  VerbsPort& port_;
  const std::shared_ptr<RegistrationTable> registrations_;
};

}  // namespace memwire::detail::verbs
