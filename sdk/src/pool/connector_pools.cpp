// The Connector's pool operations (register_pool, read_blocks, write_blocks): pools are a layer
// on core, using the steps every operation shares (Connector::Impl, core/connector_impl.hpp).
#include <optional>

#include "core/active_transfer.hpp"
#include "core/connector_impl.hpp"
#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "cuda/cuda_staging.hpp"
#include "cuda/gpu_pool_memory.hpp"
#include "memwire/error.hpp"
#include "pool/block_plan.hpp"
#include "pool/grant_windows.hpp"
#include "pool/pool_state.hpp"

namespace memwire {
namespace {

// Whether a transfer of this GPU pool goes through CUDA IPC: the owner's pool is in GPU
// memory too (an owner that predates GPU pools has none), the best transport both serve
// copies through CUDA IPC (shm: the same host), and every local allocation has an IPC handle.
bool through_cuda_ipc(const Connector::Impl& connector, const detail::GpuPoolMemory& local,
                      const PoolMetadata& remote) {
  if (!local.ipc_ready()) return false;
  for (const auto& region : remote.regions())
    if (region.device.kind() != DeviceKind::Cuda) return false;
  for (auto [transport, offer] : connector.candidates(remote.endpoint()))
    if (transport->serves_pools()) return transport->copies_through_cuda_ipc();
  return false;
}

std::shared_ptr<detail::Registration> register_pool_on(Connector::Impl& connector,
                                                       std::vector<BlockRegion> regions,
                                                       PoolOptions options) {
  if (regions.empty()) throw Error(ErrorCode::InvalidArgument, "a pool needs a region");
  std::vector<RemoteRegion> described;
  std::vector<Descriptor> memory;
  described.reserve(regions.size());
  memory.reserve(regions.size());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    auto& region = regions[i];
    if (region.stride == 0) region.stride = region.block_size;
    described.push_back({region.device, reinterpret_cast<std::uintptr_t>(region.base),
                         region.block_size, region.stride, region.count});
  }
  // The limits a reader applies, applied here: the pool's own metadata must be readable.
  std::optional<PoolMetadata> metadata;
  PoolMetadata::Fields fields;
  fields.name = options.name;
  fields.regions = std::move(described);
  try {
    metadata.emplace(std::move(fields));
  } catch (const MetadataError& error) {
    throw Error(ErrorCode::InvalidArgument, "pool " + error.field() + ": " + error.reason());
  }
  for (const auto& region : metadata->regions())
    memory.emplace_back(reinterpret_cast<void*>(region.base),
                        (region.count - 1) * region.stride + region.block_size, region.device);
  // GPU memory is checked against the driver (cuda/gpu_pool_memory.hpp).
  std::shared_ptr<const detail::GpuPoolMemory> gpu;
  if (regions.front().device.kind() == DeviceKind::Cuda ||
      regions.back().device.kind() == DeviceKind::Cuda)
    gpu = std::make_shared<detail::GpuPoolMemory>(regions,
                                                  connector.context().options.cuda_staging_limit);
  for (std::size_t i = 0; i < regions.size(); ++i)
    if (!gpu && regions[i].device.kind() != DeviceKind::Host)
      throw Error(ErrorCode::InvalidArgument, "region " + std::to_string(i) +
                                                  ": a pool's regions are all in GPU memory or "
                                                  "none is (" +
                                                  regions[i].device.to_string() + " after cpu)");
  const auto generation = connector.next_pool_generation();
  auto registration = std::make_shared<detail::Registration>(
      OperationKind::Read, std::move(memory), 0, connector.context().registrations,
      connector.context().options.connect_timeout);
  auto pool = std::make_shared<detail::PoolState>(options, generation, std::move(regions));
  pool->set_gpu(std::move(gpu));
  registration->make_pool(pool, *pool);
  const auto key = to_hex(registration->key());
  auto observed =
      connector.observation(detail::Side::Passive, registration->registered_bytes(), key, "");
  observed.counts_end = false;
  registration->observe(std::move(observed));
  Endpoint endpoint{connector.name(), connector.hostname(), {}};
  std::string declined;
  for (const auto& transport : connector.transports()) {
    if (!transport->serves_pools()) continue;
    if (auto why = transport->cannot_serve(*pool)) {
      declined += "; " + std::string(transport->name()) + " cannot serve it: " + *why;
      connector.events()->write(
          LogLevel::Info, "pool_not_offered",
          "transport " + std::string(transport->name()) + " not offered for pool '" + options.name +
              "': " + *why,
          detail::LogFields().transport(std::string(transport->name())).key(key));
      continue;
    }
    endpoint.transports.push_back(transport->offer(*registration));
  }
  if (endpoint.transports.empty())
    throw Error(ErrorCode::Transport,
                "no transport of this connector moves this pool's blocks (runs [" +
                    Connector::Impl::join(connector.transport_names()) + "]" + declined + ")");
  fields = metadata->fields();
  fields.generation = generation;
  fields.key = key;
  fields.endpoint = std::move(endpoint);
  fields.token = to_hex(registration->token());
  PoolMetadata handed_out(std::move(fields));
  if (const auto size = handed_out.to_json().size(); size > PoolMetadata::kMaxJsonBytes)
    throw Error(ErrorCode::InvalidArgument, "the pool's metadata would take " +
                                                std::to_string(size) +
                                                " bytes, more than a reader accepts (" +
                                                std::to_string(PoolMetadata::kMaxJsonBytes) + ")");
  pool->set_metadata(std::move(handed_out));
  registration->count_registered();
  connector.context().registrations->insert(registration);
  return registration;
}

std::shared_ptr<detail::ActiveTransfer> begin_block_transfer(
    Connector::Impl& connector, OperationKind kind, const detail::Registration& local,
    const std::vector<BlockPair>& pairs, const PoolMetadata& remote, std::string tag,
    const std::optional<BlockSlice>& slice = std::nullopt) {
  const auto& pool = local.pool();
  // One lookup: the pool is this connector's (and still open), and the transfer keeps it.
  auto local_pool = connector.context().registrations->find(local.key());
  if (local_pool.get() != &local)
    throw Error(ErrorCode::InvalidArgument,
                "the local pool is closed, or was registered on another connector");
  if (pairs.empty()) throw Error(ErrorCode::InvalidArgument, "no blocks to move");
  if (tag.size() > Connector::kMaxTagBytes)
    throw Error(ErrorCode::InvalidArgument, "a tag of " + std::to_string(tag.size()) +
                                                " bytes (at most " +
                                                std::to_string(Connector::kMaxTagBytes) + ")");
  auto plan = detail::plan_blocks(pairs, remote, *pool, slice);
  plan.header = detail::TransferHeader{remote.generation(), std::move(tag)};
  detail::plan_grant_windows(plan, remote);  // a request grant's: verbs keys, every scope check
  // Checked here first, as RequestScope says: the owner (or the NIC) refuses it anyway.
  auto refused = detail::outside_scope(plan, remote, kind);
  const auto bytes = plan.bytes;
  // Each run is a local descriptor (ActiveTransfer::local()), paired with its place in a remote
  // region by the run's segment.
  std::vector<Descriptor> runs;
  runs.reserve(plan.segments.size());
  const auto local_device = pool->regions().front().device;
  for (const auto& segment : plan.segments)
    runs.emplace_back(segment.local, segment.length, local_device);
  // GPU memory: copied by a same-host owner through CUDA IPC, else staged (pinned host
  // stand-ins that every transport moves; a write's are filled now).
  std::shared_ptr<detail::CudaStaging> staging;
  if (pool->gpu()) {
    if (through_cuda_ipc(connector, *pool->gpu(), remote)) {
      plan.cuda_ipc = pool->gpu();
    } else {
      staging = connector.stage(runs);  // stage_through moves the segments onto its stand-ins
      if (kind == OperationKind::Write) staging->copy_to_host();
    }
  }
  auto transfer = std::make_shared<detail::ActiveTransfer>(
      kind, std::move(runs), remote, connector.context().options.connect_timeout);
  plan.local_registration = std::move(local_pool);
  transfer->set_request(std::move(plan));
  if (staging) transfer->stage_through(staging);
  pool->track(transfer);
  transfer->observe(connector.observation(detail::Side::Active, bytes, remote.key(),
                                          remote.endpoint().connector));
  if (refused) {
    transfer->set_transport("");  // counted under transport "none": nothing was sent
    transfer->fail(*refused);
    return transfer;
  }
  connector.start_on_best_transport(transfer, remote.endpoint(), remote.key());
  return transfer;
}

}  // namespace

Pool Connector::register_pool(std::vector<BlockRegion> regions, PoolOptions options) {
  return Pool(register_pool_on(usable(), std::move(regions), std::move(options)));
}

BlockTransfer Connector::read_blocks(const PoolMetadata& remote,
                                     const std::vector<BlockPair>& blocks, const Pool& local,
                                     std::string tag) {
  return BlockTransfer(begin_block_transfer(usable(), OperationKind::Read, local.registration(),
                                            blocks, remote, std::move(tag)));
}

BlockTransfer Connector::write_blocks(const Pool& local, const std::vector<BlockPair>& blocks,
                                      const PoolMetadata& remote, std::string tag) {
  return BlockTransfer(begin_block_transfer(usable(), OperationKind::Write, local.registration(),
                                            blocks, remote, std::move(tag)));
}

BlockTransfer Connector::read_blocks(const PoolMetadata& remote,
                                     const std::vector<BlockPair>& blocks, const Pool& local,
                                     const BlockSlice& slice, std::string tag) {
  return BlockTransfer(begin_block_transfer(usable(), OperationKind::Read, local.registration(),
                                            blocks, remote, std::move(tag), slice));
}

BlockTransfer Connector::write_blocks(const Pool& local, const std::vector<BlockPair>& blocks,
                                      const PoolMetadata& remote, const BlockSlice& slice,
                                      std::string tag) {
  return BlockTransfer(begin_block_transfer(usable(), OperationKind::Write, local.registration(),
                                            blocks, remote, std::move(tag), slice));
}

}  // namespace memwire
