#include "owner/pool_facts.hpp"

#include "core/registration.hpp"
#include "pool/pool_state.hpp"

namespace memwire::detail {

const std::shared_ptr<const GpuPoolMemory>& gpu_memory(const PoolState& pool) { return pool.gpu(); }

std::shared_ptr<const GpuPoolMemory> gpu_memory(const Registration& registration) {
  return registration.pool() ? registration.pool()->gpu() : nullptr;
}

bool has_gaps(const PoolState& pool) { return pool.has_gaps(); }

bool peers_may_read(const Registration& registration) {
  return registration.pool() && registration.pool()->options().remote_read;
}

bool peers_may_write(const Registration& registration) {
  return registration.pool() && registration.pool()->options().remote_write;
}

std::span<std::byte> block_run_holding(const Registration& registration, const std::byte* data,
                                       std::size_t length) {
  if (!registration.pool()) return {};
  return registration.pool()->block_run_holding(data, length);
}

}  // namespace memwire::detail
