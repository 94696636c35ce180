// The active side of the verbs protocol (see verbs_active_side.hpp).
#include "transport/verbs/verbs_active_side.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <sstream>

#include "core/registration.hpp"
#include "transport/verbs/local_regions.hpp"
#include "transport/verbs/rail.hpp"
#include "transport/verbs/rail_offer.hpp"
#include "transport/verbs/transfer_notices.hpp"
#include "transport/verbs/verbs_port.hpp"

namespace memwire::detail::verbs {
namespace {

// Work requests per post; only the last one of a batch is signalled.
constexpr unsigned kBatch = 16;
// A rail that failed this recently is tried last for a transfer that needs only one.
constexpr std::chrono::seconds kRailPenalty{10};
// With several rails, at most this many bytes per signalled batch: a completion every few
// slices tells which rail still moves (rxe never fails an RDMA READ whose responder's link
// went down: a rail that stops is found by its silence).
constexpr std::uint64_t kMultiRailBatchBytes = 2u << 20;
// At most this many bytes in flight per leg. Far above any bandwidth-delay product (1 ms at
// 8 GB/s), and small enough that a notice queued behind them (an Abort after a cancel) is not
// late: under Soft-RoCE in TCG 8 MiB take about 0.4 s, a whole 64 MiB read several seconds,
// beyond the cancel's grace period.
constexpr std::uint64_t kLegWindow = 8u << 20;
std::uint32_t ipv4_bits(const std::string& endpoint) {
  in_addr address{};
  if (::inet_pton(AF_INET, endpoint.substr(0, endpoint.rfind(':')).c_str(), &address) != 1)
    return 0;
  return ntohl(address.s_addr);
}

// How many leading bits two addresses share: rails on one wire share their subnet.
int common_prefix(const std::string& a, const std::string& b) {
  return std::countl_zero(ipv4_bits(a) ^ ipv4_bits(b));
}

// The keys a leg needs: one per remote descriptor (region), or per window of a request grant.
std::size_t keys_wanted(const ActiveTransfer& transfer) {
  const auto& request = transfer.request();
  return request.segment_windows.empty() ? transfer.remote().spans.size() : request.grant_windows;
}

// Whether a connection keeps the owner's keys for later transfers under a header (a pool's):
// not a request grant's, which the owner may end at any time: each of its transfers asks
// (PoolBegin), so that a released grant is refused with its reason rather than by the NIC.
bool keeps_keys(const ActiveTransfer& transfer) {
  const auto& request = transfer.request();
  return request.header && request.segment_windows.empty();
}

}  // namespace

VerbsActiveSide::VerbsActiveSide(VerbsPort& port, std::uint64_t slice_bytes,
                                 std::function<void(std::string_view)> log)
    : port_(port), slice_bytes_(slice_bytes), log_(std::move(log)) {
  if (slice_bytes_ < 4096)
    throw Error(ErrorCode::InvalidArgument,
                "rdma.slice_size must be at least 4096 bytes, got " + std::to_string(slice_bytes_));
}

void VerbsActiveSide::on_notice(Connection& connection, const Notice& notice) {
  if (notice.type == NoticeType::Keys)
    on_keys(connection, notice);
  else if (notice.type == NoticeType::Accept)
    on_accept(connection, notice);
  else if (notice.type == NoticeType::Result)
    on_result(connection, notice);
}

bool VerbsActiveSide::announce_legs(Connection& connection) {
  std::vector<std::uint64_t> abandoned;
  for (auto& [seq, leg] : connection.outbound) {
    if (leg.begun) continue;
    leg.begun = true;
    if (!connection.send(begin_notice(leg))) return false;
    if (!leg.abandoned) continue;
    // Aborted before the owner heard of it, and the owner awaits its tag: told now.
    if (!connection.send(abort_notice(leg.seq, *leg.stripe, *leg.abandoned))) return false;
    abandoned.push_back(seq);
  }
  for (auto seq : abandoned) {
    auto stripe = connection.outbound.at(seq).stripe;
    connection.outbound.erase(seq);
    transfers_.erase(seq);
    stripe->legs.erase(seq);
    settle(stripe);
  }
  return true;
}

bool VerbsActiveSide::leg_of_transfer(std::uint64_t leg_seq, std::uint64_t seq) const {
  const auto found = stripes_.find(seq);
  return found != stripes_.end() && found->second->legs.contains(leg_seq);
}

OutboundTransfer* VerbsActiveSide::leg_of(std::uint64_t leg_seq) {
  auto where = transfers_.find(leg_seq);
  if (where == transfers_.end()) return nullptr;
  auto found = where->second->outbound.find(leg_seq);
  return found == where->second->outbound.end() ? nullptr : &found->second;
}

void VerbsActiveSide::begin(const std::shared_ptr<ActiveTransfer>& transfer,
                            const TransportOffer& offer, std::uint64_t seq) {
  // A tagged transfer that ended before it began still reaches the owner, whose waiters for
  // its tag hear that it failed.
  const auto& request = transfer->request();
  const bool tell_owner = request.header && !request.header->tag.empty();
  if (is_terminal(transfer->status()) && !tell_owner) return;
  const auto& remote = transfer->remote().spans;
  // Every segment within its remote region (the connector checked: the NIC would break the
  // connection over one that is not). Without a header, one segment per remote descriptor.
  if (!request.header && request.segments.size() != remote.size()) {
    transfer->fail(Error(ErrorCode::InvalidMetadata,
                         "verbs: " + std::to_string(remote.size()) + " remote and " +
                             std::to_string(request.segments.size()) + " local descriptors"));
    return;
  }
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < request.segments.size(); ++i) {
    const auto& segment = request.segments[i];
    const bool outside =
        segment.remote_region >= remote.size() ||
        remote[segment.remote_region].size < segment.remote_offset ||
        remote[segment.remote_region].size - segment.remote_offset < segment.length;
    if (outside || (!request.header && segment.length != remote[segment.remote_region].size)) {
      transfer->fail(
          Error(ErrorCode::SizeMismatch,
                outside ? "verbs: run " + std::to_string(i) + " lies outside its remote region"
                        : "descriptor " + std::to_string(i) + " differs in size"));
      return;
    }
    total += segment.length;
  }
  std::vector<PeerRail> peer;
  try {
    peer = rails_of(offer);
  } catch (const Error& error) {
    transfer->fail(error);
    return;
  }

  auto stripe = std::make_shared<Stripe>();
  stripe->seq = seq;
  stripe->transfer = transfer;
  stripe->rail_bytes.assign(port_.rail_count(), 0);
  stripe->rail_slices.assign(port_.rail_count(), 0);
  // Each local rail with the peer rail nearest to it (same subnet: same wire), one to one,
  // the nearest pairs first.
  struct Candidate {
    int bits;
    std::size_t rail;
    std::size_t peer_rail;
  };
  std::vector<Candidate> candidates;
  for (std::size_t rail = 0; rail < port_.rail_count(); ++rail)
    for (std::size_t other = 0; other < peer.size(); ++other)
      candidates.push_back(
          {common_prefix(port_.rail(rail).device->ipv4(), peer[other].address), rail, other});
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.bits > b.bits; });
  std::vector<bool> local_taken(port_.rail_count(), false), peer_taken(peer.size(), false);
  for (const auto& candidate : candidates) {
    if (local_taken[candidate.rail] || peer_taken[candidate.peer_rail]) continue;
    local_taken[candidate.rail] = peer_taken[candidate.peer_rail] = true;
    stripe->pairs.push_back({candidate.rail, peer[candidate.peer_rail].address, false});
  }
  std::sort(
      stripe->pairs.begin(), stripe->pairs.end(),
      [](const Stripe::Pair& a, const Stripe::Pair& b) { return a.local_rail < b.local_rail; });
  // Rails that failed lately go last.
  const auto now = std::chrono::steady_clock::now();
  std::stable_partition(stripe->pairs.begin(), stripe->pairs.end(), [&](const Stripe::Pair& pair) {
    return !port_.rail(pair.local_rail).failed_within(kRailPenalty, now);
  });
  // A transfer under a header keeps to one rail: its tag goes on the connection that moved its
  // bytes, and a lost rail fails it (the owner's waiters hear of that tag) rather than moving on.
  if (request.header && stripe->pairs.size() > 1) stripe->pairs.resize(1);
  stripe->slice_bytes = slice_bytes_;
  for (const auto& pair : stripe->pairs)
    stripe->slice_bytes = std::min(stripe->slice_bytes, port_.rail(pair.local_rail).chunk_bytes);
  stripe->progress = stripe->started = now;
  stripes_[seq] = stripe;

  // A transfer of one slice goes on one rail; a larger one on every pair.
  const std::size_t wanted = total > stripe->slice_bytes ? stripe->pairs.size() : 1;
  std::size_t opened = 0;
  for (std::size_t pair = 0; pair < stripe->pairs.size() && opened < wanted; ++pair)
    if (open_leg(stripe, pair)) ++opened;
  if (opened > 1)
    stripe->leg_share =
        (total / opened + stripe->slice_bytes - 1) / stripe->slice_bytes * stripe->slice_bytes;
  // One leg or several, each keeps at most kLegWindow in flight: the notices queued behind its
  // requests (an Abort after a cancel) wait for no more than that.
  stripe->leg_window = std::clamp<std::uint64_t>(
      (total / std::max<std::size_t>(opened, 1) + stripe->slice_bytes - 1) / stripe->slice_bytes *
          stripe->slice_bytes,
      stripe->slice_bytes, std::max(kLegWindow, stripe->slice_bytes));
  if (opened == 0) {
    stripes_.erase(seq);
    transfer->fail(stripe->last_error.value_or(
        Error(ErrorCode::PeerLost, "verbs: no rail pairs with the peer's")));
    return;
  }
  if (is_terminal(transfer->status()))
    abort(seq, transfer->failure().value_or(Error(ErrorCode::Cancelled, "cancelled")));
}

bool VerbsActiveSide::open_leg(const std::shared_ptr<Stripe>& stripe, std::size_t pair) {
  auto& chosen = stripe->pairs[pair];
  chosen.tried = true;
  std::shared_ptr<Connection> connection;
  try {
    connection =
        port_.connect(stripe->transfer->remote().connector, chosen.address, chosen.local_rail);
  } catch (const Error& error) {
    log("verbs: no leg of transfer " + std::to_string(stripe->seq) + " on " +
        port_.rail(chosen.local_rail).device->name() + ": " + error.what());
    stripe->last_error = error;
    port_.rail(chosen.local_rail).failed_at = std::chrono::steady_clock::now();
    return false;
  }
  OutboundTransfer leg;
  leg.seq = next_seq_++;
  leg.stripe = stripe;
  leg.pair = pair;
  leg.opened = std::chrono::steady_clock::now();
  const auto leg_seq = leg.seq;
  auto& entry = connection->outbound.emplace(leg_seq, std::move(leg)).first->second;
  transfers_[leg_seq] = connection.get();
  stripe->legs.insert(leg_seq);
  if (connection->state == Connection::State::Established) {
    entry.begun = true;
    // A pool whose keys this connection holds: one-sided from the first work request.
    const auto cached = keeps_keys(*stripe->transfer)
                            ? connection->pool_keys.find(stripe->transfer->key())
                            : connection->pool_keys.end();
    if (cached != connection->pool_keys.end() && !is_terminal(stripe->transfer->status())) {
      entry.cached_keys = true;
      entry.rkeys = cached->second;
      entry.keys_received = entry.rkeys.size();
      start_moving(*connection, entry, leg_seq);
      return true;
    }
    port_.send(*connection, begin_notice(entry));
    // The local buffers' regions, while the owner grants the keys rather than after: a
    // registration costs about as much as a round trip. Should it fail, the Accept retries it
    // and fails the transfer.
    try {
      acquire_local_regions(port_.rail(chosen.local_rail), entry);
    } catch (const Error&) {
      entry.regions.clear();
    }
  }
  return true;
}

bool VerbsActiveSide::take_keys(Connection& connection, OutboundTransfer& leg,
                                const Notice& notice) {
  const auto descriptors = keys_wanted(*leg.stripe->transfer);
  if (notice.first_index > descriptors || notice.rkeys.size() > descriptors - notice.first_index) {
    port_.fail_connection(connection,
                          Error(ErrorCode::Protocol, "verbs: " + describe(connection) +
                                                         " granted keys beyond the descriptors"));
    return false;
  }
  leg.rkeys.resize(descriptors);
  std::copy(notice.rkeys.begin(), notice.rkeys.end(),
            leg.rkeys.begin() + static_cast<std::ptrdiff_t>(notice.first_index));
  leg.keys_received += notice.rkeys.size();
  return true;
}

void VerbsActiveSide::on_keys(Connection& connection, const Notice& notice) {
  auto found = connection.outbound.find(notice.seq);
  if (found == connection.outbound.end()) return;  // aborted meanwhile
  take_keys(connection, found->second, notice);
}

void VerbsActiveSide::on_accept(Connection& connection, const Notice& notice) {
  auto found = connection.outbound.find(notice.seq);
  if (found == connection.outbound.end()) return;  // aborted meanwhile
  auto& leg = found->second;
  const auto stripe = leg.stripe;
  if (notice.error) {
    transfers_.erase(notice.seq);
    stripe->legs.erase(notice.seq);
    connection.outbound.erase(found);
    // A late leg refused after Done (the owner completed meanwhile) changes nothing.
    if (!stripe->done_sent)
      stripe->transfer->fail(
          Error(*notice.error, "the owner refused the transfer: " + notice.text));
    settle(stripe);
    return;
  }
  if (stripe->aborted || stripe->done_sent || is_terminal(stripe->transfer->status())) return;
  if (!take_keys(connection, leg, notice)) return;  // the last of the keys come with Accept
  if (leg.keys_received != keys_wanted(*stripe->transfer)) {
    port_.fail_connection(
        connection, Error(ErrorCode::Protocol,
                          "verbs: " + describe(connection) + " accepted with " +
                              std::to_string(leg.keys_received) + " keys for " +
                              std::to_string(keys_wanted(*stripe->transfer)) + " descriptors"));
    return;
  }
  // A pool's keys stay granted to this connection: its later transfers here need no Begin.
  if (keeps_keys(*stripe->transfer)) connection.pool_keys[stripe->transfer->key()] = leg.rkeys;
  start_moving(connection, leg, notice.seq);
}

bool VerbsActiveSide::start_moving(Connection& connection, OutboundTransfer& leg,
                                   std::uint64_t leg_seq) {
  const auto stripe = leg.stripe;
  if (!stripe->pin) {
    auto pin = stripe->transfer->gate().pin();
    if (!pin) return false;  // being cancelled: its failure notifier (abort) comes next
    stripe->pin = std::move(pin);
    // A device that still holds the buffers after the grace period is cut off: the QPs go.
    stripe->transfer->gate().add_breaker(
        reinterpret_cast<std::uintptr_t>(stripe.get()),
        port_.later([this, seq = stripe->seq] { break_transfer(seq); }));
  }
  try {
    // Mostly made already, while the owner granted the keys (open_leg).
    if (leg.regions.empty()) acquire_local_regions(port_.rail(connection.rail), leg);
  } catch (const Error& error) {
    leg.regions.clear();
    stripe->transfer->fail(error);  // its abort tells the owner
    settle(stripe);
    return false;
  }
  leg.accepted = true;
  // This leg first (the others may take their windows full once it is in), then those that
  // waited for it.
  connection.ready.push_back(leg_seq);
  pump(connection);
  wake_legs(*stripe);
  return true;
}

void VerbsActiveSide::pump(Connection& connection) {
  ibv_send_wr requests[kBatch];
  ibv_sge elements[kBatch];
  while (connection.state == Connection::State::Established && !connection.ready.empty()) {
    const auto credits = std::min(connection.data_credits(), kBatch);
    if (credits == 0) return;  // resumes when a batch completes
    const auto seq = connection.ready.front();
    connection.ready.pop_front();
    auto found = connection.outbound.find(seq);
    if (found == connection.outbound.end()) continue;
    auto& leg = found->second;
    const auto& stripe = *leg.stripe;
    if (stripe.aborted || stripe.done_sent || is_terminal(stripe.transfer->status())) {
      // Ended while this leg waited to post (a cancel racing its Accept): nothing of it may be
      // in flight, so no completion would let go of the pin. Settling here covers every path.
      const auto ended = leg.stripe;
      settle(ended);
      continue;
    }
    // Its window is full: it comes back to the queue when a batch of it completes.
    if (leg.bytes_in_flight > 0 && leg.bytes_in_flight + stripe.slice_bytes > stripe.leg_window)
      continue;
    // Until every leg opened with it is accepted, a leg takes no more than its share: a rail
    // whose connection comes up later still gets its part.
    // Not for longer than kShareWait: a rail that does not connect must not hold the rest.
    auto room = stripe.leg_window - leg.bytes_in_flight;
    // Nor for a sibling on a rail that failed lately: it may not connect at all.
    const auto now = std::chrono::steady_clock::now();
    if (!stripe.share_released &&
        std::any_of(stripe.legs.begin(), stripe.legs.end(), [&](std::uint64_t other) {
          const auto* other_leg = leg_of(other);
          return other_leg != nullptr && !other_leg->accepted &&
                 !port_.rail(stripe.pairs[other_leg->pair].local_rail)
                      .failed_within(kRailPenalty, now);
        })) {
      if (leg.bytes_taken >= stripe.leg_share) continue;  // woken when the others are accepted
      room = std::min(room, stripe.leg_share - leg.bytes_taken);
    }
    const auto count = leg.next_batch(
        {requests, credits}, {elements, credits}, Connection::wr_id(Connection::Tag::Data, seq),
        std::min(room, port_.rail_count() > 1 ? kMultiRailBatchBytes : UINT64_MAX));
    if (count == 0) continue;  // every slice is out: idle unless a failed leg gives some back
    if (leg.batches.size() == 1) leg.progress = std::chrono::steady_clock::now();
    if (!connection.post_data(requests, count)) {
      port_.fail_connection(connection, Error(ErrorCode::Transport, "verbs: cannot post RDMA to " +
                                                                        describe(connection)));
      return;
    }
    // Round robin: transfers sharing the QP take turns batch by batch.
    if (!stripe.all_taken()) connection.ready.push_back(seq);
  }
}

void VerbsActiveSide::on_batch_done(Connection& connection, std::uint64_t seq) {
  auto found = connection.outbound.find(seq);
  if (found != connection.outbound.end()) {
    auto& leg = found->second;
    const auto stripe = leg.stripe;
    if (!leg.batches.empty()) {
      auto& rail = port_.rail(connection.rail);
      for (const auto& slice : leg.batches.front()) {
        stripe->rail_bytes[connection.rail] += slice.length;
        ++stripe->rail_slices[connection.rail];
        rail.bytes_moved += slice.length;
        ++rail.slices_moved;
      }
      for (const auto& slice : leg.batches.front()) leg.bytes_in_flight -= slice.length;
      leg.batches.pop_front();
      if (!stripe->all_taken() && std::find(connection.ready.begin(), connection.ready.end(),
                                            seq) == connection.ready.end())
        connection.ready.push_back(seq);
      leg.progress = stripe->progress = std::chrono::steady_clock::now();
    }
    if (stripe->aborted || is_terminal(stripe->transfer->status())) {
      settle(stripe);
    } else if (!stripe->done_sent && stripe->all_taken() &&
               std::all_of(stripe->legs.begin(), stripe->legs.end(), [&](std::uint64_t other) {
                 const auto* other_leg = leg_of(other);
                 return other_leg == nullptr || other_leg->idle();
               })) {
      finish_stripe(connection, seq, *stripe);
    }
  }
  pump(connection);
}

void VerbsActiveSide::finish_stripe(Connection& connection, std::uint64_t leg_seq, Stripe& stripe) {
  stripe.done_sent = true;
  stripe.done_leg = leg_seq;
  const auto& header = stripe.transfer->request().header;
  auto done = transfer_notice(header ? NoticeType::PoolDone : NoticeType::Done, leg_seq, stripe);
  if (!header && stripe.transfer->kind() == OperationKind::Read) {
    // The READs completed: the bytes are here, and the owner granted this transfer alone
    // (OfferedAccess::grant), so no other reader can have won. It succeeds now; Done lets the
    // owner complete, and needs no Result. The pin goes first (a callback dropping the
    // operation waits for it); the buffers' regions before this handler ends, so that no later
    // transfer finds them (the caller may free the memory at once).
    stripe.pin.reset();
    std::vector<std::vector<std::shared_ptr<const ibv_mr>>> regions;
    for (auto other : stripe.legs)
      if (auto* other_leg = leg_of(other)) regions.push_back(std::exchange(other_leg->regions, {}));
    done.bytes = stripe.transfer->remote().total_size();
    done.first_index = kDoneWithoutResult;
    end_transfer(leg_seq, std::nullopt);
    port_.send(connection, done);
    return;
  }
  // Every byte is in place: let go of the buffers, then ask the owner to complete.
  for (auto other : stripe.legs)
    if (auto* other_leg = leg_of(other)) other_leg->release_buffers();
  stripe.pin.reset();
  if (header) {
    done.generation = header->generation;
    done.tag = header->tag;
    const auto* leg = leg_of(leg_seq);
    // No Begin told the owner of it: without a tag it need not hear of it at all (the
    // completions say the bytes were placed); with one, PoolDone names the tag.
    if (leg != nullptr && leg->cached_keys && header->tag.empty())
      return end_transfer(leg_seq, std::nullopt);
  } else {
    // A WRITE waits for its Result: it succeeds once the owner has its bytes.
    done.bytes = stripe.transfer->remote().total_size();
  }
  port_.send(connection, done);
}

void VerbsActiveSide::on_result(Connection& connection, const Notice& notice) {
  if (!connection.outbound.contains(notice.seq)) return;
  end_transfer(notice.seq, notice.error
                               ? std::optional<Error>(Error(*notice.error,
                                                            "the owner did not complete the "
                                                            "transfer: " +
                                                                notice.text))
                               : std::nullopt);
}

void VerbsActiveSide::end_transfer(std::uint64_t leg_seq, const std::optional<Error>& error) {
  auto* ending = leg_of(leg_seq);
  if (ending == nullptr) return;
  const auto stripe = ending->stripe;
  // The transfer ends on every rail it used.
  for (auto other : stripe->legs) {
    auto where = transfers_.find(other);
    if (where == transfers_.end()) continue;
    where->second->outbound.erase(other);
    transfers_.erase(where);
  }
  stripe->legs.clear();
  stripes_.erase(stripe->seq);
  if (log_) {
    std::ostringstream line;
    line << "verbs: transfer " << stripe->seq << " rails";
    for (std::size_t rail = 0; rail < port_.rail_count(); ++rail)
      line << " " << port_.rail(rail).device->name() << "=" << stripe->rail_bytes[rail] << "B/"
           << stripe->rail_slices[rail];
    if (stripe->first_failure != std::chrono::steady_clock::time_point{})
      line << " failover-ms="
           << std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - stripe->first_failure)
                  .count();
    log(line.str());
  }
  if (!error)
    stripe->transfer->succeed();
  else
    stripe->transfer->fail(*error);
}

void VerbsActiveSide::wake_legs(const Stripe& stripe) {
  std::vector<rdma_cm_id*> to_pump;
  for (auto leg_seq : stripe.legs) {
    auto where = transfers_.find(leg_seq);
    if (where == transfers_.end()) continue;
    Connection& connection = *where->second;
    auto* leg = leg_of(leg_seq);
    if (leg == nullptr || !leg->accepted) continue;  // it takes slices once accepted
    if (std::find(connection.ready.begin(), connection.ready.end(), leg_seq) ==
        connection.ready.end())
      connection.ready.push_back(leg_seq);
    to_pump.push_back(connection.id());
  }
  for (auto* id : to_pump)
    if (auto found = port_.connections().find(id); found != port_.connections().end()) {
      const auto keep = found->second;
      pump(*keep);
    }
}

void VerbsActiveSide::settle(const std::shared_ptr<Stripe>& stripe) {
  const bool ended =
      stripe->aborted || stripe->done_sent || is_terminal(stripe->transfer->status());
  if (!ended) return;
  for (auto leg_seq : stripe->legs)
    if (const auto* leg = leg_of(leg_seq); leg != nullptr && !leg->idle()) return;
  // No request of this transfer is in flight on any rail: the buffers may go.
  for (auto leg_seq : stripe->legs)
    if (auto* leg = leg_of(leg_seq)) leg->release_buffers();
  stripe->pin.reset();
  if (stripe->aborted && stripe->legs.empty()) stripes_.erase(stripe->seq);
}

void VerbsActiveSide::abort(std::uint64_t seq, const Error& error) {
  auto found = stripes_.find(seq);
  if (found == stripes_.end()) return;
  const auto stripe = found->second;
  stripe->aborted = true;
  std::vector<rdma_cm_id*> broken;
  const std::vector<std::uint64_t> legs(stripe->legs.begin(), stripe->legs.end());
  for (auto leg_seq : legs) {
    auto where = transfers_.find(leg_seq);
    if (where == transfers_.end()) continue;
    Connection& connection = *where->second;
    auto leg = connection.outbound.find(leg_seq);
    if (leg == connection.outbound.end()) continue;
    if (leg->second.begun) {
      if (!connection.send(abort_notice(leg_seq, *stripe, error)))
        broken.push_back(connection.id());
    } else if (const auto& header = stripe->transfer->request().header;
               header && !header->tag.empty()) {
      // Not announced yet: the owner would wait for its tag in vain. Announced and aborted
      // together once the connection is up (announce_legs).
      leg->second.abandoned = error;
      continue;
    }
    // Work requests still in flight keep the leg (and the buffers' regions) until they end.
    if (leg->second.idle()) {
      leg->second.release_buffers();
      connection.outbound.erase(leg);
      transfers_.erase(where);
      stripe->legs.erase(leg_seq);
    }
  }
  settle(stripe);
  for (auto* id : broken)
    if (auto connection = port_.connections().find(id); connection != port_.connections().end()) {
      const auto keep = connection->second;
      port_.fail_connection(
          *keep, Error(ErrorCode::Transport, "verbs: cannot post to the QP of " + describe(*keep)));
    }
}

}  // namespace memwire::detail::verbs
