#include "memwire/connector.hpp"

#include <unistd.h>

#include <atomic>
#include <climits>
#include <mutex>
#include <optional>

#include "core/active_transfer.hpp"
#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "cuda/cuda_staging.hpp"
#include "cuda/gpu_pool_memory.hpp"
#include "memwire/clock.hpp"
#include "memwire/error.hpp"
#include "memwire/error_codes.hpp"
#include "pool/block_plan.hpp"
#include "pool/grant_windows.hpp"
#include "pool/pool_state.hpp"
#include "telemetry/event_log.hpp"
#include "telemetry/telemetry_recorder.hpp"
#include "transport/registry.hpp"
#include "transport/transport.hpp"
#include "util/fork_generation.hpp"
#include "util/peer_name.hpp"

namespace memwire {
namespace {

std::string local_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// Descriptors of one side: non-empty, no null or empty ranges, one memory kind. CUDA memory is
// checked against the driver by its staging (cuda/cuda_staging.hpp).
void check_local(const std::vector<Descriptor>& local) {
  if (local.empty()) throw Error(ErrorCode::InvalidArgument, "no descriptors");
  // The limit a reader applies to metadata, applied where it is made: an owner must not hand
  // out metadata that no reader accepts.
  if (local.size() > RdmaMetadata::kMaxDescriptors)
    throw Error(ErrorCode::InvalidArgument, std::to_string(local.size()) +
                                                " descriptors: an operation has at most " +
                                                std::to_string(RdmaMetadata::kMaxDescriptors));
  for (std::size_t i = 0; i < local.size(); ++i) {
    const auto& descriptor = local[i];
    const auto where = "descriptor " + std::to_string(i);
    if (descriptor.ptr() == nullptr) throw Error(ErrorCode::InvalidArgument, where + " is null");
    if (descriptor.size() == 0) throw Error(ErrorCode::InvalidArgument, where + " is empty");
    if (descriptor.device().kind() != local.front().device().kind())
      throw Error(ErrorCode::InvalidArgument, "all descriptors must share one memory kind");
  }
}

// Remote and local descriptors pair by index and must match exactly in size.
void check_pairing(OperationKind wanted, const RdmaMetadata& remote,
                   const std::vector<Descriptor>& local) {
  if (remote.operation_kind() != wanted) {
    const bool reading = wanted == OperationKind::Read;
    throw Error(ErrorCode::Pairing, std::string(reading ? "a read" : "a write") +
                                        " needs the metadata of a " +
                                        (reading ? "readable" : "writable") + " operation, got a " +
                                        (reading ? "writable" : "readable") + " one");
  }
  const auto& remote_descriptors = remote.descriptors();
  if (remote_descriptors.size() != local.size())
    throw Error(ErrorCode::SizeMismatch, "remote has " + std::to_string(remote_descriptors.size()) +
                                             " descriptors, local has " +
                                             std::to_string(local.size()));
  for (std::size_t i = 0; i < local.size(); ++i)
    if (remote_descriptors[i].size != local[i].size())
      throw Error(ErrorCode::SizeMismatch, "descriptor " + std::to_string(i) + ": remote " +
                                               std::to_string(remote_descriptors[i].size) +
                                               " bytes, local " + std::to_string(local[i].size()) +
                                               " bytes");
  if (remote.expires_at_ms() != 0 && unix_now_ms() > remote.expires_at_ms())
    throw Error(ErrorCode::Expired, "remote metadata expired");
}

std::uint64_t total_bytes(const std::vector<Descriptor>& descriptors) {
  std::uint64_t total = 0;
  for (const auto& descriptor : descriptors) total += descriptor.size();
  return total;
}

}  // namespace

class Connector::Impl {
 public:
  explicit Impl(ConnectorOptions options) {
    // Peers see it in every Hello: a name they could not store is refused here, not there.
    if (!options.name.empty()) detail::check_peer_name(options.name);
    context_.connector_name = options.name.empty() ? to_hex(random_id()) : options.name;
    context_.hostname = local_hostname();
    context_.options = std::move(options);
    context_.registrations = std::make_shared<detail::RegistrationTable>();
    if (context_.options.telemetry)
      context_.telemetry = std::make_shared<detail::TelemetryRecorder>(detail::known_transports());
    events_ = std::make_shared<const detail::EventLog>(
        context_.connector_name, context_.options.log_level, std::move(context_.options.log));
    context_.events = events_;
    // Transports that report in plain text (verbs) still come out as structured lines.
    context_.options.log = nullptr;
    if (events_->enabled(LogLevel::Info))
      context_.options.log = [events = events_](std::string_view text) {
        events->write(LogLevel::Info, "transport_note", text);
      };
    for (const auto& name : context_.options.transports) {
      try {
        transports_.push_back(detail::make_transport(name, context_));
        events_->write(LogLevel::Debug, "transport_started", "transport " + name + " started",
                       detail::LogFields().transport(name));
      } catch (const Error& error) {
        events_->write(
            LogLevel::Info, "transport_skipped",
            "transport " + name + " not started: " + error.what(),
            detail::LogFields().transport(name).code(std::string(error_code_name(error.code()))));
      }
    }
    if (transports_.empty()) {
      events_->write(LogLevel::Error, "connector_failed", "no transport could start");
      throw Error(ErrorCode::Transport, "no transport could start");
    }
  }

  ~Impl() { context_.registrations->revoke_all(); }

  // True in a child forked after this connector was made: its threads are the parent's.
  bool inherited() const noexcept { return detail::fork_generation() != fork_generation_; }

  const std::string& name() const noexcept { return context_.connector_name; }
  const std::string& hostname() const noexcept { return context_.hostname; }

  TelemetrySnapshot telemetry() const {
    if (!context_.telemetry) {
      TelemetrySnapshot empty;
      empty.connector = name();
      return empty;
    }
    return context_.telemetry->snapshot(name(), transport_names());
  }

  std::vector<std::string> transport_names() const {
    std::vector<std::string> names;
    for (const auto& transport : transports_) names.emplace_back(transport->name());
    return names;
  }

  std::shared_ptr<detail::Registration> create_passive(OperationKind kind,
                                                       std::vector<Descriptor> local) {
    check_local(local);
    const auto ttl = context_.options.metadata_ttl;
    const std::int64_t expires = ttl.count() > 0 ? unix_now_ms() + ttl.count() : 0;
    // CUDA memory: the transports serve pinned host stand-ins. A readable's are filled now when
    // a transport lets peers read them unseen (verbs), else by the first request that reads
    // them (none through CUDA IPC does: that copies the device memory itself).
    auto staging = stage(local);
    if (staging && kind == OperationKind::Read && peers_read_unseen()) staging->copy_to_host();
    auto registration = std::make_shared<detail::Registration>(
        kind, staging ? staging->host() : std::move(local), expires, context_.registrations,
        context_.options.connect_timeout);
    if (staging) registration->stage_through(staging);
    const auto key = to_hex(registration->key());
    registration->observe(
        observation(detail::Side::Passive, registration->registered_bytes(), key, ""));
    Endpoint endpoint{name(), hostname(), {}};
    // A transport that cannot serve this memory (verbs registration refused, ...) is left out;
    // the others still offer it.
    std::string refusals;
    for (const auto& transport : transports_) {
      try {
        endpoint.transports.push_back(transport->offer(*registration));
      } catch (const Error& error) {
        events_->write(LogLevel::Warn, "transport_refused_memory",
                       "transport " + std::string(transport->name()) +
                           " cannot offer this memory: " + error.what(),
                       detail::LogFields()
                           .transport(transport->name())
                           .key(key)
                           .code(std::string(error_code_name(error.code()))));
        refusals += std::string(refusals.empty() ? "" : "; ") + error.what();
      }
    }
    if (endpoint.transports.empty())
      throw Error(ErrorCode::Transport, "no transport can offer this memory (" + refusals + ")");
    // Where the memory lives (cuda:N for staged memory), at the address the transports serve.
    std::vector<RemoteDescriptor> described;
    for (std::size_t i = 0; i < registration->descriptors().size(); ++i) {
      const auto& served = registration->descriptors()[i];
      described.push_back({staging ? staging->device()[i].device() : served.device(),
                           reinterpret_cast<std::uintptr_t>(served.ptr()), served.size()});
    }
    registration->set_metadata(RdmaMetadata({.kind = kind,
                                             .descriptors = std::move(described),
                                             .notification_key = key,
                                             .endpoint = std::move(endpoint),
                                             .token = to_hex(registration->token()),
                                             .expires_at_ms = expires}));
    registration->count_registered();
    context_.registrations->insert(registration);
    return registration;
  }

  std::shared_ptr<detail::ActiveTransfer> begin_active(OperationKind kind,
                                                       const RdmaMetadata& remote,
                                                       std::vector<Descriptor> local) {
    check_local(local);
    check_pairing(kind, remote, local);
    // CUDA memory: copied by a same-host owner through CUDA IPC, else the transports move
    // pinned host stand-ins (a write's are filled now).
    auto ipc = one_shot_cuda_ipc(local, remote);
    auto staging = ipc ? nullptr : stage(local);
    if (staging && kind == OperationKind::Write) staging->copy_to_host();
    auto transfer = std::make_shared<detail::ActiveTransfer>(kind, std::move(local), remote,
                                                             context_.options.connect_timeout);
    if (staging) transfer->stage_through(staging);
    if (ipc) transfer->copy_through_cuda_ipc(std::move(ipc));
    const auto& peer = remote.endpoint().connector;
    const auto& key = remote.notification_key();
    transfer->observe(observation(detail::Side::Active, total_bytes(transfer->local()), key, peer));
    start_on_best_transport(transfer, remote.endpoint(), key);
    return transfer;
  }

  std::shared_ptr<detail::Registration> register_pool(std::vector<BlockRegion> regions,
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
      gpu = std::make_shared<detail::GpuPoolMemory>(regions, context_.options.cuda_staging_limit);
    for (std::size_t i = 0; i < regions.size(); ++i)
      if (!gpu && regions[i].device.kind() != DeviceKind::Host)
        throw Error(ErrorCode::InvalidArgument, "region " + std::to_string(i) +
                                                    ": a pool's regions are all in GPU memory or "
                                                    "none is (" +
                                                    regions[i].device.to_string() + " after cpu)");
    const auto generation = ++pool_generations_;
    auto registration = std::make_shared<detail::Registration>(
        OperationKind::Read, std::move(memory), 0, context_.registrations,
        context_.options.connect_timeout);
    auto pool = std::make_shared<detail::PoolState>(options, generation, std::move(regions));
    pool->set_gpu(std::move(gpu));
    registration->make_pool(pool);
    const auto key = to_hex(registration->key());
    auto observed = observation(detail::Side::Passive, registration->registered_bytes(), key, "");
    observed.counts_end = false;
    registration->observe(std::move(observed));
    Endpoint endpoint{name(), hostname(), {}};
    std::string declined;
    for (const auto& transport : transports_) {
      if (!transport->serves_pools()) continue;
      if (auto why = transport->cannot_serve(*pool)) {
        declined += "; " + std::string(transport->name()) + " cannot serve it: " + *why;
        events_->write(LogLevel::Info, "pool_not_offered",
                       "transport " + std::string(transport->name()) + " not offered for pool '" +
                           options.name + "': " + *why,
                       detail::LogFields().transport(std::string(transport->name())).key(key));
        continue;
      }
      endpoint.transports.push_back(transport->offer(*registration));
    }
    if (endpoint.transports.empty())
      throw Error(ErrorCode::Transport,
                  "no transport of this connector moves this pool's blocks (runs [" +
                      join(transport_names()) + "]" + declined + ")");
    fields = metadata->fields();
    fields.generation = generation;
    fields.key = key;
    fields.endpoint = std::move(endpoint);
    fields.token = to_hex(registration->token());
    PoolMetadata handed_out(std::move(fields));
    if (const auto size = handed_out.to_json().size(); size > PoolMetadata::kMaxJsonBytes)
      throw Error(ErrorCode::InvalidArgument,
                  "the pool's metadata would take " + std::to_string(size) +
                      " bytes, more than a reader accepts (" +
                      std::to_string(PoolMetadata::kMaxJsonBytes) + ")");
    pool->set_metadata(std::move(handed_out));
    registration->count_registered();
    context_.registrations->insert(registration);
    return registration;
  }

  std::shared_ptr<detail::ActiveTransfer> begin_blocks(
      OperationKind kind, const detail::Registration& local, const std::vector<BlockPair>& pairs,
      const PoolMetadata& remote, std::string tag,
      const std::optional<BlockSlice>& slice = std::nullopt) {
    const auto& pool = local.pool();
    // One lookup: the pool is this connector's (and still open), and the transfer keeps it.
    auto local_pool = context_.registrations->find(local.key());
    if (local_pool.get() != &local)
      throw Error(ErrorCode::InvalidArgument,
                  "the local pool is closed, or was registered on another connector");
    if (pairs.empty()) throw Error(ErrorCode::InvalidArgument, "no blocks to move");
    if (tag.size() > Connector::kMaxTagBytes)
      throw Error(ErrorCode::InvalidArgument, "a tag of " + std::to_string(tag.size()) +
                                                  " bytes (at most " +
                                                  std::to_string(Connector::kMaxTagBytes) + ")");
    auto plan = detail::plan_blocks(pairs, remote, *pool, slice);
    plan.tag = std::move(tag);
    plan.generation = remote.generation();
    detail::plan_grant_windows(plan, remote);  // verbs keys under a request grant
    // Checked here first, as RequestScope says: the owner (or the NIC) refuses it anyway.
    auto refused = detail::outside_scope(plan, remote, kind);
    const auto bytes = plan.bytes;
    // Each run is a local descriptor, paired with its place in a remote region: what verbs
    // moves (the stream transports take the plan itself).
    std::vector<Descriptor> runs;
    runs.reserve(plan.segments.size());
    const auto local_device = pool->regions().front().device;
    for (const auto& segment : plan.segments)
      runs.emplace_back(segment.local, segment.length, local_device);
    // GPU memory: copied by a same-host owner through CUDA IPC, else staged (pinned host
    // stand-ins that every transport moves; a write's are filled now).
    std::shared_ptr<detail::CudaStaging> staging;
    if (pool->gpu()) {
      if (through_cuda_ipc(*pool->gpu(), remote)) {
        plan.cuda_ipc = pool->gpu();
      } else {
        staging = stage(runs);
        for (std::size_t i = 0; i < plan.segments.size(); ++i)
          plan.segments[i].local = static_cast<std::byte*>(staging->host()[i].ptr());
        if (kind == OperationKind::Write) staging->copy_to_host();
      }
    }
    auto transfer = std::make_shared<detail::ActiveTransfer>(kind, std::move(runs), remote,
                                                             context_.options.connect_timeout);
    if (staging) transfer->stage_through(staging);
    plan.local_pool = std::move(local_pool);
    transfer->move_blocks(std::move(plan));
    pool->track(transfer);
    transfer->observe(
        observation(detail::Side::Active, bytes, remote.key(), remote.endpoint().connector));
    if (refused) {
      transfer->set_transport("");  // counted under transport "none": nothing was sent
      transfer->fail(*refused);
      return transfer;
    }
    start_on_best_transport(transfer, remote.endpoint(), remote.key());
    return transfer;
  }

 private:
  static std::string join(const std::vector<std::string>& names) {
    std::string joined;
    for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
    return joined;
  }

  // Best shared transport first; one that cannot reach the peer after all (shm refused by the
  // kernel, ...) gives way to the next, with the reason logged. Throws (the transfer failed)
  // when none can take it.
  void start_on_best_transport(const std::shared_ptr<detail::ActiveTransfer>& transfer,
                               const Endpoint& remote, const std::string& key) {
    const auto kind = transfer->kind();
    const auto& peer = remote.connector;
    std::string refusals;
    for (auto [transport, offer] : candidates(remote)) {
      if (transfer->blocks() && !transport->serves_pools()) continue;
      const std::string transport_name(transport->name());
      detail::StartResult started;
      try {
        transfer->set_transport(transport_name);
        events_->write(LogLevel::Debug, "transport_chosen",
                       "transport " + transport_name + " chosen",
                       detail::LogFields()
                           .peer(peer)
                           .transport(transport_name)
                           .key(key)
                           .kind(to_string(kind)));
        started = transport->start(transfer, *offer);
      } catch (const Error& error) {
        // Counted and logged like any failed operation, on the transport it tried.
        transfer->fail(error);
        throw;
      }
      if (!started.unusable) return;
      const auto& why = *started.unusable;
      events_->write(LogLevel::Warn, "transport_fallback",
                     "transport " + transport_name + " unusable, trying the next: " + why,
                     detail::LogFields()
                         .peer(peer)
                         .transport(transport_name)
                         .key(key)
                         .code(std::string(error_code_name(ErrorCode::Transport))));
      refusals += std::string(refusals.empty() ? "" : "; ") + why;
    }
    Error failure(ErrorCode::Transport,
                  no_shared_transport(remote) + (refusals.empty() ? "" : " (" + refusals + ")"));
    transfer->set_transport("");  // counted under transport "none": no transport took it
    transfer->fail(failure);
    throw failure;
  }

  // Whether a transfer of this GPU pool goes through CUDA IPC: the owner's pool is in GPU
  // memory too (an owner that predates GPU pools has none), the best transport both serve
  // copies through CUDA IPC (shm: the same host), and every local allocation has an IPC handle.
  bool through_cuda_ipc(const detail::GpuPoolMemory& local, const PoolMetadata& remote) {
    if (!local.ipc_ready()) return false;
    for (const auto& region : remote.regions())
      if (region.device.kind() != DeviceKind::Cuda) return false;
    for (auto [transport, offer] : candidates(remote.endpoint()))
      if (transport->serves_pools()) return transport->copies_through_cuda_ipc();
    return false;
  }

  // Whether a peer may read this connector's memory without its threads seeing the read.
  bool peers_read_unseen() const {
    for (const auto& transport : transports_)
      if (transport->reads_without_the_owner()) return true;
    return false;
  }

  // The local GPU memory of a one-shot operation that the owner copies through CUDA IPC, or
  // null: every local and remote descriptor is GPU memory, the best transport both run copies
  // through CUDA IPC (shm), its offer says the owner takes such requests, and each local
  // allocation has a handle.
  std::shared_ptr<const detail::GpuPoolMemory> one_shot_cuda_ipc(
      const std::vector<Descriptor>& local, const RdmaMetadata& remote) {
    for (const auto& descriptor : local)
      if (descriptor.device().kind() != DeviceKind::Cuda) return nullptr;
    for (const auto& descriptor : remote.descriptors())
      if (descriptor.device.kind() != DeviceKind::Cuda) return nullptr;
    const auto shared = candidates(remote.endpoint());
    if (shared.empty() || !shared.front().first->copies_through_cuda_ipc()) return nullptr;
    const auto& attributes = shared.front().second->attributes;
    const auto said = attributes.find(detail::kCudaIpcAttribute);
    if (said == attributes.end() || said->second != detail::kCudaIpcAttributeValue) return nullptr;
    // Each descriptor a region of one block, checked against the driver as a pool's are.
    std::vector<BlockRegion> regions;
    regions.reserve(local.size());
    for (const auto& descriptor : local)
      regions.push_back({descriptor.ptr(), descriptor.size(), 0, 1, descriptor.device()});
    std::shared_ptr<const detail::GpuPoolMemory> gpu;
    try {
      gpu = std::make_shared<detail::GpuPoolMemory>(regions, context_.options.cuda_staging_limit);
    } catch (const Error&) {
      return nullptr;  // staged instead, whose checks say what is wrong with the memory
    }
    if (!gpu->ipc_ready()) return nullptr;
    events_->write(LogLevel::Debug, "cuda_ipc",
                   std::to_string(total_bytes(local)) + " bytes of " +
                       local.front().device().to_string() +
                       " memory copied by the owner through CUDA IPC");
    return gpu;
  }

  // Pinned host stand-ins for CUDA descriptors (null for host memory), logged so that the
  // path the bytes take is visible.
  std::shared_ptr<detail::CudaStaging> stage(const std::vector<Descriptor>& local) {
    if (local.front().device().kind() != DeviceKind::Cuda) return nullptr;
    const auto& driver = detail::CudaStaging::require_driver();
    std::call_once(pinned_pool_made_, [&] {
      pinned_pool_ =
          std::make_shared<detail::PinnedPool>(driver, context_.options.cuda_staging_limit);
    });
    auto staging = std::make_shared<detail::CudaStaging>(local, pinned_pool_);
    events_->write(LogLevel::Debug, "cuda_staged",
                   std::to_string(staging->bytes()) + " bytes of " +
                       local.front().device().to_string() +
                       " memory staged through pinned host memory");
    return staging;
  }

  detail::Observation observation(detail::Side side, std::uint64_t bytes, std::string_view key,
                                  std::string_view peer) const {
    detail::Observation observation;
    observation.telemetry = context_.telemetry;
    observation.side = side;
    observation.bytes = bytes;
    // The strings only serve log lines: not copied when nothing would be logged.
    if (events_->enabled(LogLevel::Warn)) {
      observation.events = events_;
      observation.key = key;
      observation.peer = peer;
    }
    return observation;
  }

  // Transports both ends run, in the remote's order of preference (best first).
  std::vector<std::pair<detail::Transport*, const TransportOffer*>> candidates(
      const Endpoint& remote) {
    std::vector<std::pair<detail::Transport*, const TransportOffer*>> shared;
    for (const auto& offer : remote.transports)
      for (const auto& transport : transports_)
        if (transport->name() == offer.name && transport->can_reach(offer))
          shared.emplace_back(transport.get(), &offer);
    return shared;
  }

  std::string no_shared_transport(const Endpoint& remote) const {
    std::string offered, ours;
    for (const auto& offer : remote.transports)
      offered += (offered.empty() ? "" : ", ") + offer.name;
    for (const auto& name : transport_names()) ours += (ours.empty() ? "" : ", ") + name;
    return "no usable transport in common: remote offers [" + offered + "], this connector runs [" +
           ours + "]";
  }

  const std::uint64_t fork_generation_ = detail::fork_generation();
  detail::TransportContext context_;
  std::shared_ptr<const detail::EventLog> events_;
  std::vector<std::unique_ptr<detail::Transport>> transports_;
  std::once_flag pinned_pool_made_;
  std::shared_ptr<detail::PinnedPool> pinned_pool_;  // made at the first CUDA operation
  std::atomic<std::uint64_t> pool_generations_{0};
};

Connector::Connector(ConnectorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Connector::~Connector() {
  // In a forked child the parent's threads do not exist, and joining their records (which
  // glibc hands to the child's new threads) would hang: the inherited state is left alone.
  if (impl_ && impl_->inherited()) (void)impl_.release();
}

Connector::Impl& Connector::usable() const {
  if (impl_->inherited())
    throw Error(ErrorCode::InvalidArgument,
                "connector '" + impl_->name() +
                    "' was made before fork() and belongs to the parent process; make a new "
                    "Connector in the child");
  return *impl_;
}

const std::string& Connector::name() const noexcept { return impl_->name(); }
const std::string& Connector::hostname() const noexcept { return impl_->hostname(); }
std::vector<std::string> Connector::transports() const { return usable().transport_names(); }
TelemetrySnapshot Connector::telemetry() const { return usable().telemetry(); }

ReadableOperation Connector::create_readable(std::vector<Descriptor> local) {
  return ReadableOperation(usable().create_passive(OperationKind::Read, std::move(local)));
}

WritableOperation Connector::create_writable(std::vector<Descriptor> local) {
  return WritableOperation(usable().create_passive(OperationKind::Write, std::move(local)));
}

ReadOperation Connector::begin_read(const RdmaMetadata& remote, std::vector<Descriptor> local) {
  return ReadOperation(usable().begin_active(OperationKind::Read, remote, std::move(local)));
}

WriteOperation Connector::begin_write(std::vector<Descriptor> local, const RdmaMetadata& remote) {
  return WriteOperation(usable().begin_active(OperationKind::Write, remote, std::move(local)));
}

Pool Connector::register_pool(std::vector<BlockRegion> regions, PoolOptions options) {
  return Pool(usable().register_pool(std::move(regions), std::move(options)));
}

BlockTransfer Connector::read_blocks(const PoolMetadata& remote,
                                     const std::vector<BlockPair>& blocks, const Pool& local,
                                     std::string tag) {
  return BlockTransfer(usable().begin_blocks(OperationKind::Read, local.registration(), blocks,
                                             remote, std::move(tag)));
}

BlockTransfer Connector::write_blocks(const Pool& local, const std::vector<BlockPair>& blocks,
                                      const PoolMetadata& remote, std::string tag) {
  return BlockTransfer(usable().begin_blocks(OperationKind::Write, local.registration(), blocks,
                                             remote, std::move(tag)));
}

BlockTransfer Connector::read_blocks(const PoolMetadata& remote,
                                     const std::vector<BlockPair>& blocks, const Pool& local,
                                     const BlockSlice& slice, std::string tag) {
  return BlockTransfer(usable().begin_blocks(OperationKind::Read, local.registration(), blocks,
                                             remote, std::move(tag), slice));
}

BlockTransfer Connector::write_blocks(const Pool& local, const std::vector<BlockPair>& blocks,
                                      const PoolMetadata& remote, const BlockSlice& slice,
                                      std::string tag) {
  return BlockTransfer(usable().begin_blocks(OperationKind::Write, local.registration(), blocks,
                                             remote, std::move(tag), slice));
}

}  // namespace memwire
