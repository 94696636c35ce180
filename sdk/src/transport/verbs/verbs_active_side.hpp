#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/active_transfer.hpp"
#include "memwire/error.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/outbound_transfer.hpp"
#include "transport/verbs/verbs_connection.hpp"
#include "transport/verbs/verbs_wire.hpp"

namespace memwire::detail::verbs {

class VerbsPort;

// The active side of the verbs protocol: Begin on each rail a transfer uses, then RDMA
// READ/WRITE batches of its slices under the keys the owner granted that connection (Keys)
// once it accepted, then Done; the owner's Result
// ends the transfer (a one-shot READ ends on its own READ completions). Abort is the error notice.
// A transfer is a Stripe cut into slices; each rail pair it uses is a leg (an OutboundTransfer on
// that pair's connection). A leg whose rail fails gives its slices back and the legs left (or a
// pair not tried yet) move them. Runs under the engine's work (its progress thread, or a caller
// or waiter that took it), but for next_seq().
class VerbsActiveSide {
 public:
  // Throws Error{InvalidArgument} when `slice_bytes` is below 4096.
  VerbsActiveSide(VerbsPort& port, std::uint64_t slice_bytes,
                  std::function<void(std::string_view)> log);

  // A number for a transfer or a leg; any thread.
  std::uint64_t next_seq() noexcept { return next_seq_++; }

  // Opens the legs of `transfer` (numbered `seq`) to the owner behind `offer`.
  void begin(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer,
             std::uint64_t seq);
  // The transfer `seq` failed on this side (a cancel, a drop): Abort to the owner.
  void abort(std::uint64_t seq, const Error& error);

  // `connection` is established: Begin for the legs opened on it meanwhile. False when a post
  // failed.
  bool announce_legs(Connection& connection);
  // Accept or Result from an owner.
  void on_notice(Connection& connection, const Notice& notice);
  // A signalled batch of leg `seq` completed on `connection`.
  void on_batch_done(Connection& connection, std::uint64_t seq);
  // The closed connection on local rail `rail` carried `legs`: their slices go back to their
  // transfers, which go on over the legs left once the handler returns (resume_orphans). The
  // leg `culprit`, whose own work request failed, fails with `culprit_error`; others `error`.
  void on_connection_lost(std::size_t rail, std::map<std::uint64_t, OutboundTransfer> legs,
                          const Error& error, std::optional<std::uint64_t> culprit,
                          const std::optional<Error>& culprit_error);
  // After every handler: transfers that lost a leg go on.
  void resume_orphans();

  // With several rails: legs that stopped moving while others move fail their connection.
  void check_stalls();
  // When check_stalls() wants to run next; nothing while no striped transfer moves.
  std::optional<std::chrono::steady_clock::time_point> next_stall_check();

  // Whether `leg_seq` is a leg of the transfer numbered `seq`.
  bool leg_of_transfer(std::uint64_t leg_seq, std::uint64_t seq) const;

  // The progress thread is gone (shutdown): every transfer left fails with `error`.
  void fail_all(const Error& error);

 private:
  // Opens a leg of `stripe` on its pair `pair`; false when no connection could be started.
  bool open_leg(const std::shared_ptr<Stripe>& stripe, std::size_t pair);
  // Keys the owner granted `leg` (a Keys notice, or the last of them on Accept); false (and
  // the connection failed) when they do not fit its descriptors.
  bool take_keys(Connection& connection, OutboundTransfer& leg, const Notice& notice);
  void on_keys(Connection& connection, const Notice& notice);
  // `leg` holds its keys: pin the buffers, find their regions, post. False when the transfer
  // failed instead.
  bool start_moving(Connection& connection, OutboundTransfer& leg, std::uint64_t leg_seq);
  // The transfer of `notice_seq`'s leg ended (the owner's Result, or a pool transfer that
  // needs none): forgotten on every rail, then succeeded or failed with `error`.
  void end_transfer(std::uint64_t leg_seq, const std::optional<Error>& error);
  void on_accept(Connection& connection, const Notice& notice);
  void on_result(Connection& connection, const Notice& notice);
  // Posts batches of the legs ready on `connection`, as its credits and their windows allow.
  void pump(Connection& connection);
  // After a leg failed: the legs left take its slices, or a new pair is tried, or, with no
  // rail left, the transfer fails.
  void resume(const std::shared_ptr<Stripe>& stripe);
  // Queues and pumps every accepted leg of `stripe`.
  void wake_legs(const Stripe& stripe);
  // Every slice moved: Done on `connection`.
  void finish_stripe(Connection& connection, std::uint64_t leg_seq, Stripe& stripe);
  // Lets go of the buffers once no leg has requests in flight; forgets an aborted stripe
  // without legs.
  void settle(const std::shared_ptr<Stripe>& stripe);
  // A cancelled transfer's device still holds its buffers after the grace period: its
  // connections go.
  void break_transfer(std::uint64_t seq);
  OutboundTransfer* leg_of(std::uint64_t leg_seq);
  void log(const std::string& line) const {
    if (log_) log_(line);
  }

  VerbsPort& port_;
  const std::uint64_t slice_bytes_;
  const std::function<void(std::string_view)> log_;
  std::atomic<std::uint64_t> next_seq_{1};

  // Under the engine's work only.
  std::map<std::uint64_t, Connection*> transfers_;            // leg seq -> its connection
  std::map<std::uint64_t, std::shared_ptr<Stripe>> stripes_;  // transfer seq -> its stripe
  std::vector<std::shared_ptr<Stripe>> orphaned_;  // lost a leg: resumed after the handler
  std::chrono::steady_clock::time_point stall_check_at_{};
};

}  // namespace memwire::detail::verbs
