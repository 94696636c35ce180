#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/access_gate.hpp"
#include "core/active_transfer.hpp"
#include "memwire/error.hpp"
#include "transport/verbs/verbs_handles.hpp"

namespace memwire::detail::verbs {

// A piece of one descriptor, moved by one RDMA READ/WRITE work request.
struct Slice {
  std::size_t index = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// One active transfer as the verbs transport runs it over one or more rails: the slices not
// yet moved, handed out to its legs (one per pair of rails in use) as they have room. A leg
// whose rail fails gives its unfinished slices back, and the legs left take them.
struct Stripe {
  struct Pair {
    std::size_t local_rail = 0;
    std::string address;  // the peer rail's "ip:port"
    bool tried = false;   // a leg was opened on it (it is not tried twice)
  };

  std::uint64_t seq = 0;  // the transfer's number (its failure notifier, its breaker)
  std::shared_ptr<ActiveTransfer> transfer;
  std::vector<Pair> pairs;
  std::uint64_t slice_bytes = 0;
  // Bytes one leg may have in flight: legs opened together share the slices instead of the
  // first one accepted taking them all; a faster rail comes back for more sooner.
  std::uint64_t leg_window = UINT64_MAX;
  std::uint64_t leg_share = UINT64_MAX;  // of the whole, while a sibling is not accepted yet
  std::set<std::uint64_t> legs;          // seqs of the legs alive now

  std::deque<Slice> returned;  // given back by a failed leg: posted before new ones
  std::size_t next_index = 0;
  std::uint64_t next_offset = 0;

  std::optional<AccessGate::Pin> pin;  // held while any leg may have requests in flight
  bool aborted = false;                // ended on this side: post nothing more
  bool done_sent = false;
  std::uint64_t done_leg = 0;             // the leg whose connection carried Done
  std::optional<Error> last_error;        // why the last leg failed
  std::vector<std::uint64_t> rail_bytes;  // per local rail, bytes moved
  std::vector<std::uint64_t> rail_slices;
  std::chrono::steady_clock::time_point first_failure{};  // when a leg first failed
  std::chrono::steady_clock::time_point progress{};       // last batch done on any leg
  std::chrono::steady_clock::time_point started{};
  bool share_released = false;  // legs no longer keep to leg_share

  bool all_taken() const noexcept {
    return returned.empty() && next_index >= transfer->local().size();
  }
  // The next slice to post, or nothing when every slice was handed out.
  std::optional<Slice> take();
};

// A leg: the part of a stripe that runs on one connection (one local rail, one peer rail).
// Announced (Begin), accepted by the owner, then it posts the stripe's slices as RDMA
// READ/WRITE in batches; the leg that posts the last one sends Done.
struct OutboundTransfer {
  std::uint64_t seq = 0;  // on its connection
  std::shared_ptr<Stripe> stripe;
  std::size_t pair = 0;

  bool begun = false;  // Begin sent: the owner knows this leg
  // A tagged pool transfer aborted before its Begin went: Begin and Abort go together.
  std::optional<Error> abandoned;
  // A pool transfer that moves under keys its connection already held: no Begin was sent.
  bool cached_keys = false;
  bool accepted = false;
  // The keys the owner granted this leg's connection, one per descriptor (Keys notices).
  std::vector<std::uint32_t> rkeys;
  std::size_t keys_received = 0;

  // While bytes move: the local buffers' regions on this leg's device.
  std::vector<std::shared_ptr<const ibv_mr>> regions;
  std::deque<std::vector<Slice>> batches;  // posted, oldest first; one completion each
  std::uint64_t bytes_in_flight = 0;
  std::uint64_t bytes_taken = 0;                     // posted by this leg, ever
  std::chrono::steady_clock::time_point progress{};  // last batch done, or first one posted
  std::chrono::steady_clock::time_point opened{};    // when its Begin was queued

  bool idle() const noexcept { return batches.empty(); }
  // Fills `wrs` (chained, the last one signalled with `last_wr_id`) with slices taken from
  // the stripe; remembers them as one batch; returns how many.
  unsigned next_batch(std::span<ibv_send_wr> wrs, std::span<ibv_sge> sges, std::uint64_t last_wr_id,
                      std::uint64_t max_bytes);
  void release_buffers() noexcept { regions.clear(); }
};

}  // namespace memwire::detail::verbs
