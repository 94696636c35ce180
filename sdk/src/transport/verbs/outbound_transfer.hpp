#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "access_gate.hpp"
#include "active_transfer.hpp"
#include "transport/verbs/verbs_handles.hpp"

namespace memwire::detail::verbs {

// An active transfer as the verbs transport runs it on one connection: announced (Begin),
// accepted by the owner, its chunks posted as RDMA READ/WRITE in batches, then Done.
struct OutboundTransfer {
  std::uint64_t seq = 0;
  std::shared_ptr<ActiveTransfer> transfer;
  std::vector<std::uint32_t> rkeys;  // per descriptor, from the owner's offer

  bool begun = false;    // Begin sent: the owner knows this transfer
  bool aborted = false;  // the transfer ended on this side: post nothing more
  bool done_sent = false;

  // While bytes move: the local buffers' regions and the pin that keeps them valid.
  std::vector<std::shared_ptr<const ibv_mr>> regions;
  std::optional<AccessGate::Pin> pin;
  std::size_t next_index = 0;
  std::uint64_t next_offset = 0;
  unsigned batches_in_flight = 0;

  bool all_posted() const noexcept { return next_index >= rkeys.size(); }
  // Fills `wrs` (chained, the last one signalled with `last_wr_id`) with the next chunks of at
  // most `chunk` bytes each; returns how many.
  unsigned next_batch(std::span<ibv_send_wr> wrs, std::span<ibv_sge> sges, std::uint64_t chunk,
                      std::uint64_t last_wr_id);
  // Lets go of the local buffers: only once no work request of this transfer is in flight.
  void release_buffers() noexcept {
    pin.reset();
    regions.clear();
  }
};

}  // namespace memwire::detail::verbs
