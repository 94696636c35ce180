#pragma once

#include <span>
#include <vector>

#include "transport/stream/frame.hpp"
#include "transport/stream/stream_connection.hpp"

namespace memwire::detail {

class GpuPoolMemory;

// The active side of a pool request through CUDA IPC (PROTOCOL.md, "CUDA IPC").

// The allocation table of a request whose pieces' peer_address are device addresses of `local`:
// one entry per allocation they use, each piece's `reserved` set to its entry. Throws
// Error{InvalidArgument} for a piece in no allocation of the pool.
std::vector<FrameIpcAllocation> ipc_allocations_for(const GpuPoolMemory& local,
                                                    std::span<FramePiece> pieces);
// Marks a pool request (its piece list and tag in `text` already) as one through CUDA IPC:
// frame version 2, kCudaIpc, and the table after the tag.
void mark_cuda_ipc(OutFrame& frame, const std::vector<FrameIpcAllocation>& table);

}  // namespace memwire::detail
