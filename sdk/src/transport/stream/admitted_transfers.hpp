#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "memwire/metadata.hpp"
#include "pool/pool_state.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

class Registration;

// The tagged pool transfers one connection's peer opened (docs/PROTOCOL.md): what the owner
// admitted, so that a tag is delivered only as the last step of one of them, and once. A
// connection's frames are read in order, so a transfer's requests all precede its PoolEnd.
class AdmittedTransfers {
 public:
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
  // when the connection has kMostOpen open already. True when it opened the transfer.
  bool admit(std::uint64_t id, Transfer request);
  // A request of transfer `id` was refused: an open transfer delivers no tag now, one never
  // opened is remembered as failed (its PoolEnd may be on its way already).
  void refuse(std::uint64_t id);
  // Open transfer `id`, or null; valid until the table changes.
  const Transfer* find(std::uint64_t id) const;
  // Takes transfer `id` to end it; nullopt when it is not open.
  std::optional<Transfer> take(std::uint64_t id);
  // Remembers how a taken (or never opened) transfer ended, for a PoolEnd that follows.
  void ended(std::uint64_t id, Outcome outcome);
  Outcome outcome(std::uint64_t id) const;
  // The open ones, taken (the connection is gone).
  std::unordered_map<std::uint64_t, Transfer> take_all() { return std::move(open_); }

  static constexpr std::size_t kMostOpen = 4096;
  static constexpr std::size_t kMostRemembered = 4096;

 private:
  std::unordered_map<std::uint64_t, Transfer> open_;
  std::unordered_map<std::uint64_t, Outcome> ended_;
  std::deque<std::uint64_t> ended_order_;
};

}  // namespace memwire::detail
