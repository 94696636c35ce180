#include "transport/verbs/outbound_transfer.hpp"

#include <algorithm>

namespace memwire::detail::verbs {

unsigned OutboundTransfer::next_batch(std::span<ibv_send_wr> wrs, std::span<ibv_sge> sges,
                                      std::uint64_t chunk, std::uint64_t last_wr_id) {
  const bool reading = transfer->kind() == OperationKind::Read;
  const auto& local = transfer->local();
  const auto& remote = transfer->remote().descriptors();
  unsigned count = 0;
  while (count < wrs.size() && count < sges.size() && !all_posted()) {
    const auto size = local[next_index].size();
    const auto length = std::min<std::uint64_t>(chunk, size - next_offset);
    auto& sge = sges[count];
    sge = {};
    sge.addr = reinterpret_cast<std::uintptr_t>(local[next_index].ptr()) + next_offset;
    sge.length = static_cast<std::uint32_t>(length);
    sge.lkey = regions[next_index]->lkey;
    auto& wr = wrs[count];
    wr = {};
    wr.wr_id = last_wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = reading ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = remote[next_index].ptr + next_offset;
    wr.wr.rdma.rkey = rkeys[next_index];
    if (count > 0) wrs[count - 1].next = &wr;
    ++count;
    next_offset += length;
    if (next_offset == size) {
      ++next_index;
      next_offset = 0;
    }
  }
  // One completion per batch: the last request is signalled, and on an RC QP its success
  // implies the success of every request before it.
  if (count > 0) wrs[count - 1].send_flags = IBV_SEND_SIGNALED;
  return count;
}

}  // namespace memwire::detail::verbs
