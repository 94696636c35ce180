// The active side of the verbs protocol when things go wrong (see verbs_active_side.hpp): a
// leg's connection lost (its slices go to the rails left), a rail that stopped moving, a
// cancelled transfer whose device holds its buffers too long, the progress thread's end.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "transport/verbs/rail.hpp"
#include "transport/verbs/verbs_active_side.hpp"
#include "transport/verbs/verbs_port.hpp"

namespace memwire::detail::verbs {
namespace {

// A leg with requests in flight and no completion for this long, while another leg of its
// transfer completed some, is on a rail that stopped; with none completing anywhere for
// kPeerStall, the peer is unreachable on every rail.
constexpr std::chrono::seconds kRailStall{4};
constexpr std::chrono::seconds kPeerStall{10};
// How long legs of a striped transfer keep to their share while a sibling connects.
constexpr std::chrono::seconds kShareWait{2};

}  // namespace

void VerbsActiveSide::resume(const std::shared_ptr<Stripe>& stripe) {
  auto known = stripes_.find(stripe->seq);
  if (known == stripes_.end() || known->second != stripe) return;  // ended meanwhile
  if (stripe->aborted || is_terminal(stripe->transfer->status())) {
    settle(stripe);
    return;
  }
  const auto peer = stripe->transfer->remote().connector;
  if (stripe->done_sent) {
    // The owner may or may not have completed: without its Result there is no telling.
    if (!stripe->legs.contains(stripe->done_leg))
      stripe->transfer->fail(
          Error(ErrorCode::PeerLost,
                "verbs: the connection that carried the completion notice "
                "to " +
                    peer + " was lost: " + (stripe->last_error ? stripe->last_error->what() : "")));
    return;
  }
  if (!stripe->legs.empty()) {
    wake_legs(*stripe);  // the legs left take the slices given back
    return;
  }
  // No leg left: a pair not tried yet, if any.
  for (std::size_t pair = 0; pair < stripe->pairs.size(); ++pair)
    if (!stripe->pairs[pair].tried && open_leg(stripe, pair)) {
      log("verbs: transfer " + std::to_string(stripe->seq) + " goes on over " +
          port_.rail(stripe->pairs[pair].local_rail).device->name());
      return;
    }
  // One rail: its own error, as it was. Several: which, and the last one's error.
  const auto last = stripe->last_error.value_or(Error(ErrorCode::PeerLost, "?"));
  if (stripe->pairs.size() == 1)
    stripe->transfer->fail(last);
  else
    stripe->transfer->fail(
        Error(last.code(), "verbs: no rail left to " + peer + " (" +
                               std::to_string(stripe->pairs.size()) +
                               " tried); the last: " + std::string(last.message())));
  // No leg is left to let go of the pin taken at its first Accept: without this, dropping the
  // operation would wait for it forever (its breaker finds no connection to reset).
  settle(stripe);
}

std::optional<std::chrono::steady_clock::time_point> VerbsActiveSide::next_stall_check() {
  if (port_.rail_count() < 2) return std::nullopt;
  const bool moving = std::any_of(stripes_.begin(), stripes_.end(), [](const auto& entry) {
    return !entry.second->aborted && !entry.second->done_sent && !entry.second->legs.empty();
  });
  if (!moving) return std::nullopt;
  // Kept once set: re-arming the timer for other reasons must not push the check away.
  const auto now = std::chrono::steady_clock::now();
  if (stall_check_at_ <= now) stall_check_at_ = now + std::chrono::milliseconds(500);
  return stall_check_at_;
}

void VerbsActiveSide::check_stalls() {
  if (port_.rail_count() < 2) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < stall_check_at_) return;
  std::map<rdma_cm_id*, std::string> stalled;
  std::vector<std::shared_ptr<Stripe>> released;
  for (const auto& [seq, stripe] : stripes_) {
    if (stripe->aborted || stripe->done_sent || is_terminal(stripe->transfer->status())) continue;
    if (!stripe->share_released && now - stripe->started >= kShareWait) {
      stripe->share_released = true;  // legs that waited for a slow sibling take the rest
      released.push_back(stripe);
    }
    for (auto leg_seq : stripe->legs) {
      const auto* leg = leg_of(leg_seq);
      if (leg == nullptr) continue;
      const auto& connection = *transfers_.at(leg_seq);
      auto stall = [&](std::chrono::steady_clock::duration quiet, std::string_view what) {
        stalled.emplace(
            connection.id(),
            "verbs: " + port_.rail(connection.rail).device->name() + " to " + describe(connection) +
                std::string(what) + " for " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count()) +
                " ms");
      };
      // A leg the owner never answered (its Accept lost with the link, or the owner's host
      // gone quiet) moves nothing either: without this it would wait for the deadline.
      if (!leg->accepted) {
        if (now - leg->opened >= kPeerStall) stall(now - leg->opened, ": no answer to Begin");
        continue;
      }
      if (leg->idle()) continue;
      const auto quiet = now - leg->progress;
      if (quiet < kRailStall) continue;
      const bool others_move =
          stripe->progress > leg->progress && now - stripe->progress < kRailStall;
      if (!others_move && quiet < kPeerStall) continue;
      stall(quiet,
            others_move ? " moved nothing while other rails did (link down?)" : " moved nothing");
    }
  }
  for (const auto& stripe : released) wake_legs(*stripe);
  for (const auto& [id, why] : stalled)
    if (auto found = port_.connections().find(id); found != port_.connections().end()) {
      const auto keep = found->second;
      port_.fail_connection(*keep, Error(ErrorCode::PeerLost, why));
    }
}

void VerbsActiveSide::break_transfer(std::uint64_t seq) {
  auto found = stripes_.find(seq);
  if (found == stripes_.end()) return;
  const auto stripe = found->second;
  std::vector<rdma_cm_id*> holding;
  for (auto leg_seq : stripe->legs)
    if (auto where = transfers_.find(leg_seq); where != transfers_.end())
      holding.push_back(where->second->id());
  for (auto* id : holding)
    if (auto connection = port_.connections().find(id); connection != port_.connections().end()) {
      const auto keep = connection->second;
      port_.fail_connection(*keep, Error(ErrorCode::PeerLost,
                                         "verbs: a cancelled transfer's RDMA did not finish within "
                                         "the grace period; connection to " +
                                             describe(*keep) + " reset"));
    }
}

void VerbsActiveSide::on_connection_lost(std::size_t rail,
                                         std::map<std::uint64_t, OutboundTransfer> legs,
                                         const Error& error, std::optional<std::uint64_t> culprit,
                                         const std::optional<Error>& culprit_error) {
  // The QP is gone: no request of these legs touches memory any more.
  for (auto& [seq, leg] : legs) {
    transfers_.erase(seq);
    leg.release_buffers();
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto& [seq, leg] : legs) {
    const auto stripe = leg.stripe;
    stripe->legs.erase(seq);
    // Its unfinished slices go back to the transfer: the legs left move them again.
    std::size_t given_back = 0;
    for (const auto& batch : leg.batches)
      for (const auto& slice : batch) {
        stripe->returned.push_back(slice);
        ++given_back;
      }
    leg.batches.clear();
    leg.bytes_in_flight = 0;
    if (stripe->aborted || is_terminal(stripe->transfer->status())) {
      settle(stripe);
      continue;
    }
    Error why = culprit && *culprit == seq && culprit_error ? *culprit_error : error;
    if (leg.cached_keys && why.code() == ErrorCode::AccessDenied)
      why = Error(ErrorCode::Expired,
                  "the owner no longer grants this pool's keys (the pool was closed or "
                  "re-registered, or its owner restarted): fetch its metadata again (" +
                      std::string(why.message()) + ")");
    stripe->last_error = why;
    if (stripe->first_failure == std::chrono::steady_clock::time_point{})
      stripe->first_failure = now;
    // A rail that broke is worked around; a refusal, garbage or a shutdown is the transfer's.
    const auto code = why.code();
    if (code == ErrorCode::Cancelled || code == ErrorCode::AccessDenied ||
        code == ErrorCode::Protocol) {
      stripe->transfer->fail(why);
      settle(stripe);
      continue;
    }
    log("verbs: transfer " + std::to_string(stripe->seq) + " lost its leg on " +
        port_.rail(rail).device->name() + "; " + std::to_string(given_back) +
        " slices in flight go to the rails left");
    orphaned_.push_back(stripe);
  }
}

void VerbsActiveSide::resume_orphans() {
  // Now that the handler that failed their leg is out of the way. Bounded: each round tries
  // pairs not tried before; what is left waits for the next handler.
  for (int round = 0; round < 16 && !orphaned_.empty(); ++round) {
    auto orphans = std::move(orphaned_);
    orphaned_.clear();
    for (const auto& stripe : orphans) resume(stripe);
  }
}

void VerbsActiveSide::fail_all(const Error& error) {
  for (const auto& [seq, stripe] : stripes_) stripe->transfer->fail(error);
  orphaned_.clear();
  stripes_.clear();
}

}  // namespace memwire::detail::verbs
