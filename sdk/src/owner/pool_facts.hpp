#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace memwire::detail {

class GpuPoolMemory;
class PoolState;
class Registration;

// What a transport may need to know of a pool to move its bytes, answered by the owner's floor so
// that no transport reads the pool's state itself. `registration` may be a one-shot
// operation's: then it is no pool (null, false, empty).

// Its blocks in GPU memory: the memory (cuda/gpu_pool_memory.hpp); null for host memory.
const std::shared_ptr<const GpuPoolMemory>& gpu_memory(const PoolState& pool);
std::shared_ptr<const GpuPoolMemory> gpu_memory(const Registration& registration);
// Bytes that are no block's inside the regions' spans: a transport that grants whole spans
// (verbs keys) must not serve it.
bool has_gaps(const PoolState& pool);
// What the pool lets peers do.
bool peers_may_read(const Registration& registration);
bool peers_may_write(const Registration& registration);
// The run of blocks holding all of [data, data + length), every byte in it a block's: what a
// same-host peer may map to copy blocks itself; empty when there is none (or no pool).
std::span<std::byte> block_run_holding(const Registration& registration, const std::byte* data,
                                       std::size_t length);

}  // namespace memwire::detail
