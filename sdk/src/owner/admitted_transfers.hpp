#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/transfer_budget.hpp"
#include "memwire/metadata.hpp"
#include "pool/pool_state.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

class Registration;

// The tagged pool transfers one connection's peer opened (docs/PROTOCOL.md): what the owner
// admitted, so that a tag is delivered only as the last step of one of them, and once. A
// connection's frames are read in order, so a transfer's requests all precede its PoolEnd.
// Each open one counts in the connector's TransferBudget through `account` until it ends: a
// granted peer's (its token a grant's) by its grant's name, in the room kept for granted peers.
class AdmittedTransfers {
 public:
  explicit AdmittedTransfers(std::unique_ptr<TransferBudget::Account> account)
      : account_(std::move(account)) {}

  struct Transfer {
    Id128 key{};
    OperationKind kind = OperationKind::Write;
    std::string tag;
    PoolState::Peer peer;
    std::weak_ptr<Registration> pool;
    bool failed = false;                  // a request of it was refused: its tag is not delivered
    std::shared_ptr<RequestGrant> grant;  // the request grant it was admitted under, if any
  };
  // How a transfer that is no longer open ended.
  enum class Outcome { Unknown, Delivered, Failed };

  // A request of tagged transfer `id`, checked by the owner: opens the transfer, or must agree
  // with its first request (pool, kind, tag, peer). Throws Protocol when it does not, Transport
  // when the budget has no room for one more (the error names the limit). True when it opened
  // the transfer.
  bool admit(std::uint64_t id, Transfer request);
  // A request of transfer `id` was refused: an open transfer delivers no tag now, one never
  // opened is remembered as failed (its PoolEnd may be on its way already), in the shared
  // class unless admit() remembered it in its own.
  void refuse(std::uint64_t id);
  // Open transfer `id`, or null; valid until the table changes.
  const Transfer* find(std::uint64_t id) const;
  // Takes transfer `id` to end it; nullopt when it is not open.
  std::optional<Transfer> take(std::uint64_t id);
  // Remembers how a taken (or never opened) transfer ended, for a PoolEnd that follows: the
  // connection's oldest outcome is forgotten when the budget has no room for a new one, and
  // with none to forget this one is not kept (its PoolEnd finds it unknown). `granted`: the
  // transfer's peer had a grant's token (its outcome counts in the granted peers' room).
  void ended(std::uint64_t id, Outcome outcome, bool granted);
  Outcome outcome(std::uint64_t id) const;
  // The open ones, taken (the connection is gone).
  std::unordered_map<std::uint64_t, Transfer> take_all();
  std::size_t open() const noexcept { return open_.size(); }

 private:
  // The name the budget counts a transfer by: its grant's, or empty under the shared token.
  static const std::string& granted_name(const Transfer& transfer);

  std::unique_ptr<TransferBudget::Account> account_;
  std::unordered_map<std::uint64_t, Transfer> open_;
  struct Ended {
    Outcome outcome;
    bool granted;
  };
  std::unordered_map<std::uint64_t, Ended> ended_;
  std::deque<std::uint64_t> ended_order_;
};

}  // namespace memwire::detail
