#include "memwire/connector.hpp"

#include <unistd.h>

#include <climits>
#include <optional>

#include "core/active_transfer.hpp"
#include "core/connector_impl.hpp"
#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "core/transfer_budget.hpp"
#include "cuda/cuda_staging.hpp"
#include "cuda/gpu_pool_memory.hpp"
#include "memwire/clock.hpp"
#include "memwire/error.hpp"
#include "memwire/error_codes.hpp"
#include "transport/registry.hpp"
#include "transport/transport.hpp"
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

Connector::Impl::Impl(ConnectorOptions options) {
  // Peers see it in every Hello: a name they could not store is refused here, not there.
  if (!options.name.empty()) detail::check_peer_name(options.name);
  context_.connector_name = options.name.empty() ? to_hex(random_id()) : options.name;
  context_.hostname = local_hostname();
  context_.options = std::move(options);
  context_.registrations = std::make_shared<detail::RegistrationTable>();
  if (context_.options.telemetry)
    context_.telemetry = std::make_shared<detail::TelemetryRecorder>(detail::known_transports());
  const auto& limits = context_.options.stream;
  context_.transfer_budget = std::make_shared<detail::TransferBudget>(
      detail::TransferBudget::Limits{limits.max_open_transfers_per_connection,
                                     limits.max_open_transfers_per_peer,
                                     limits.max_open_transfers_per_user, limits.max_open_transfers,
                                     limits.max_open_shared_transfers},
      context_.telemetry);
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

Connector::Impl::~Impl() { context_.registrations->revoke_all(); }

TelemetrySnapshot Connector::Impl::telemetry() const {
  if (!context_.telemetry) {
    TelemetrySnapshot empty;
    empty.connector = name();
    return empty;
  }
  return context_.telemetry->snapshot(name(), transport_names());
}

std::vector<std::string> Connector::Impl::transport_names() const {
  std::vector<std::string> names;
  for (const auto& transport : transports_) names.emplace_back(transport->name());
  return names;
}

std::shared_ptr<detail::Registration> Connector::Impl::create_passive(
    OperationKind kind, std::vector<Descriptor> local) {
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

std::shared_ptr<detail::ActiveTransfer> Connector::Impl::begin_active(
    OperationKind kind, const RdmaMetadata& remote, std::vector<Descriptor> local) {
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

std::string Connector::Impl::join(const std::vector<std::string>& names) {
  std::string joined;
  for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

void Connector::Impl::start_on_best_transport(
    const std::shared_ptr<detail::ActiveTransfer>& transfer, const Endpoint& remote,
    const std::string& key) {
  const auto kind = transfer->kind();
  const auto& peer = remote.connector;
  std::string refusals;
  for (auto [transport, offer] : candidates(remote)) {
    if (transfer->request().header && !transport->serves_pools()) continue;
    const std::string transport_name(transport->name());
    detail::StartResult started;
    try {
      transfer->set_transport(transport_name);
      if (events_->enabled(LogLevel::Debug))  // its text is built for a log that wants it only
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

bool Connector::Impl::peers_read_unseen() const {
  for (const auto& transport : transports_)
    if (transport->reads_without_the_owner()) return true;
  return false;
}

std::shared_ptr<const detail::GpuPoolMemory> Connector::Impl::one_shot_cuda_ipc(
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

std::shared_ptr<detail::CudaStaging> Connector::Impl::stage(const std::vector<Descriptor>& local) {
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

detail::Observation Connector::Impl::observation(detail::Side side, std::uint64_t bytes,
                                                 std::string_view key,
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

std::vector<std::pair<detail::Transport*, const TransportOffer*>> Connector::Impl::candidates(
    const Endpoint& remote) const {
  std::vector<std::pair<detail::Transport*, const TransportOffer*>> shared;
  for (const auto& offer : remote.transports)
    for (const auto& transport : transports_)
      if (transport->name() == offer.name && transport->can_reach(offer))
        shared.emplace_back(transport.get(), &offer);
  return shared;
}

std::string Connector::Impl::no_shared_transport(const Endpoint& remote) const {
  std::string offered, ours;
  for (const auto& offer : remote.transports) offered += (offered.empty() ? "" : ", ") + offer.name;
  for (const auto& name : transport_names()) ours += (ours.empty() ? "" : ", ") + name;
  return "no usable transport in common: remote offers [" + offered + "], this connector runs [" +
         ours + "]";
}

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

}  // namespace memwire
