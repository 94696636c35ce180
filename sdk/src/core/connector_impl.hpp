#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/operation_core.hpp"
#include "memwire/connector.hpp"
#include "telemetry/event_log.hpp"
#include "telemetry/telemetry_recorder.hpp"
#include "transport/transport.hpp"
#include "util/fork_generation.hpp"

namespace memwire {

namespace detail {
class ActiveTransfer;
class CudaStaging;
class GpuPoolMemory;
class PinnedPool;
class Registration;
}  // namespace detail

// A Connector's state and the steps its operations share: its transports, telemetry and log,
// staging, and starting a transfer on the best transport both ends run. One-shot operations are
// core/connector.cpp's; pool transfers are pool/connector_pools.cpp's, which use the same steps.
class Connector::Impl {
 public:
  explicit Impl(ConnectorOptions options);
  ~Impl();

  // True in a child forked after this connector was made: its threads are the parent's.
  bool inherited() const noexcept { return detail::fork_generation() != fork_generation_; }

  const std::string& name() const noexcept { return context_.connector_name; }
  const std::string& hostname() const noexcept { return context_.hostname; }
  const detail::TransportContext& context() const noexcept { return context_; }
  const std::shared_ptr<const detail::EventLog>& events() const noexcept { return events_; }
  const std::vector<std::unique_ptr<detail::Transport>>& transports() const noexcept {
    return transports_;
  }

  TelemetrySnapshot telemetry() const;
  std::vector<std::string> transport_names() const;

  // One-shot operations.
  std::shared_ptr<detail::Registration> create_passive(OperationKind kind,
                                                       std::vector<Descriptor> local);
  std::shared_ptr<detail::ActiveTransfer> begin_active(OperationKind kind,
                                                       const RdmaMetadata& remote,
                                                       std::vector<Descriptor> local);

  // Best shared transport first; one that cannot reach the peer after all (shm refused by the
  // kernel, ...) gives way to the next, with the reason logged. Throws (the transfer failed)
  // when none can take it.
  void start_on_best_transport(const std::shared_ptr<detail::ActiveTransfer>& transfer,
                               const Endpoint& remote, const std::string& key);
  // Transports both ends run, in the remote's order of preference (best first).
  std::vector<std::pair<detail::Transport*, const TransportOffer*>> candidates(
      const Endpoint& remote) const;
  // Pinned host stand-ins for CUDA descriptors (null for host memory), logged so that the
  // path the bytes take is visible.
  std::shared_ptr<detail::CudaStaging> stage(const std::vector<Descriptor>& local);
  detail::Observation observation(detail::Side side, std::uint64_t bytes, std::string_view key,
                                  std::string_view peer) const;
  // A new pool's generation: never the same twice on this connector.
  std::uint64_t next_pool_generation() noexcept { return ++pool_generations_; }

  static std::string join(const std::vector<std::string>& names);

 private:
  // Whether a peer may read this connector's memory without its threads seeing the read.
  bool peers_read_unseen() const;
  // The local GPU memory of a one-shot operation that the owner copies through CUDA IPC, or
  // null: every local and remote descriptor is GPU memory, the best transport both run copies
  // through CUDA IPC (shm), its offer says the owner takes such requests, and each local
  // allocation has a handle.
  std::shared_ptr<const detail::GpuPoolMemory> one_shot_cuda_ipc(
      const std::vector<Descriptor>& local, const RdmaMetadata& remote);
  std::string no_shared_transport(const Endpoint& remote) const;

  const std::uint64_t fork_generation_ = detail::fork_generation();
  detail::TransportContext context_;
  std::shared_ptr<const detail::EventLog> events_;
  std::vector<std::unique_ptr<detail::Transport>> transports_;
  std::once_flag pinned_pool_made_;
  std::shared_ptr<detail::PinnedPool> pinned_pool_;  // made at the first CUDA operation
  std::atomic<std::uint64_t> pool_generations_{0};
};

}  // namespace memwire
