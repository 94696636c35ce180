#include "transport/verbs/outbound_transfer.hpp"

#include <algorithm>

namespace memwire::detail::verbs {

std::optional<Slice> Stripe::take() {
  if (!returned.empty()) {
    auto slice = returned.front();
    returned.pop_front();
    return slice;
  }
  const auto& local = transfer->local();
  if (next_index >= local.size()) return std::nullopt;
  const auto size = local[next_index].size();
  Slice slice{next_index, next_offset, std::min<std::uint64_t>(slice_bytes, size - next_offset)};
  next_offset += slice.length;
  if (next_offset == size) {
    ++next_index;
    next_offset = 0;
  }
  return slice;
}

unsigned OutboundTransfer::next_batch(std::span<ibv_send_wr> wrs, std::span<ibv_sge> sges,
                                      std::uint64_t last_wr_id, std::uint64_t max_bytes) {
  const auto& transfer = *stripe->transfer;
  const bool reading = transfer.kind() == OperationKind::Read;
  const auto& local = transfer.local();
  const auto& request = transfer.request();
  const auto& remote = transfer.remote().spans;
  std::vector<Slice> batch;
  unsigned count = 0;
  std::uint64_t bytes = 0;
  while (count < wrs.size() && count < sges.size() && (count == 0 || bytes < max_bytes)) {
    auto slice = stripe->take();
    if (!slice) break;
    auto& sge = sges[count];
    sge = {};
    sge.addr = reinterpret_cast<std::uintptr_t>(local[slice->index].ptr()) + slice->offset;
    sge.length = static_cast<std::uint32_t>(slice->length);
    sge.lkey = regions[slice->index]->lkey;
    auto& wr = wrs[count];
    wr = {};
    wr.wr_id = last_wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = reading ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    // Its segment's place in a remote region (descriptor), under that region's key, or under
    // a request grant the key of the owner's window over it.
    const auto& segment = request.segments[slice->index];
    wr.wr.rdma.remote_addr =
        remote[segment.remote_region].ptr + segment.remote_offset + slice->offset;
    wr.wr.rdma.rkey = request.segment_windows.empty()
                          ? rkeys[segment.remote_region]
                          : rkeys[request.segment_windows[slice->index]];
    if (count > 0) wrs[count - 1].next = &wr;
    batch.push_back(*slice);
    bytes += slice->length;
    ++count;
  }
  // One completion per batch: the last request is signalled, and on an RC QP its success
  // implies the success of every request before it.
  if (count > 0) {
    wrs[count - 1].send_flags = IBV_SEND_SIGNALED;
    bytes_in_flight += bytes;
    bytes_taken += bytes;
    batches.push_back(std::move(batch));
  }
  return count;
}

}  // namespace memwire::detail::verbs
