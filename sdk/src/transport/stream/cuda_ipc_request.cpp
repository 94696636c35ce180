#include "transport/stream/cuda_ipc_request.hpp"

#include <cstring>

#include "cuda/gpu_pool_memory.hpp"
#include "memwire/error.hpp"

namespace memwire::detail {

std::vector<FrameIpcAllocation> ipc_allocations_for(const GpuPoolMemory& local,
                                                    std::span<FramePiece> pieces) {
  std::vector<FrameIpcAllocation> table;
  std::vector<const GpuPoolMemory::Allocation*> listed;
  for (auto& piece : pieces) {
    const auto* allocation =
        local.allocation_holding(reinterpret_cast<const void*>(piece.peer_address), piece.length);
    if (allocation == nullptr || !allocation->has_handle)
      throw Error(ErrorCode::InvalidArgument,
                  "a block of the local GPU pool lies in no allocation with an IPC handle");
    std::size_t entry = 0;
    while (entry < listed.size() && listed[entry] != allocation) ++entry;
    if (entry == listed.size()) {
      listed.push_back(allocation);
      FrameIpcAllocation described;
      std::memcpy(described.handle, allocation->handle.bytes, sizeof described.handle);
      described.base = allocation->base;
      described.size = allocation->size;
      table.push_back(described);
    }
    piece.reserved = static_cast<std::uint32_t>(entry);
  }
  return table;
}

void mark_cuda_ipc(OutFrame& frame, const std::vector<FrameIpcAllocation>& table) {
  const auto entries = static_cast<std::uint32_t>(table.size());
  if (is_pool_request(frame.header.type)) {
    auto pool = as_pool(frame.header);
    pool.ipc_allocations = entries;
    frame.header = as_frame(pool);
  } else {
    frame.header.ipc_allocations = entries;  // a one-shot piece request
  }
  frame.header.version = kCudaIpcVersion;
  frame.header.flags |= frame_flags::kCudaIpc;
  frame.text.append(reinterpret_cast<const char*>(table.data()),
                    table.size() * sizeof(FrameIpcAllocation));
}

}  // namespace memwire::detail
