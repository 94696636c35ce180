#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/access_gate.hpp"
#include "core/operation_core.hpp"
#include "core/transfer_request.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

// The core of an active operation: local descriptors paired by index with the remote ones.
// A transport moves the bytes from its own threads, then calls succeed() or fail().
class CudaStaging;
class GpuPoolMemory;
class Registration;

// Of the remote side, what transports need once a transfer started: the spans it may touch
// (a one-shot operation's descriptors, or a pool's regions, each from its first block to the
// end of its last), the owner's connector, and the metadata's expiry (0: none).
struct RemoteTarget {
  std::vector<RemoteDescriptor> spans;
  std::string connector;
  std::int64_t expires_at_ms = 0;
  std::uint64_t total_size() const noexcept;
};

class ActiveTransfer final : public OperationCore {
 public:
  // A one-shot operation: `local` pairs by index with the remote descriptors.
  ActiveTransfer(OperationKind kind, std::vector<Descriptor> local, const RdmaMetadata& remote,
                 std::chrono::milliseconds grace);
  // A transfer between pools: `local` are the runs its request (set_request) moves to and from
  // the remote pool's regions.
  ActiveTransfer(OperationKind kind, std::vector<Descriptor> local, const PoolMetadata& remote,
                 std::chrono::milliseconds grace);
  ~ActiveTransfer() override;

  // What the transports move: the caller's descriptors, or their staging's host stand-ins.
  const std::vector<Descriptor>& local() const noexcept { return local_; }
  // The caller's descriptors (a read's results).
  const std::vector<Descriptor>& results() const noexcept;
  // CUDA memory: local() are the staging's stand-ins, and a read copies them to the device
  // before it completes. Set before the transfer starts.
  void stage_through(std::shared_ptr<const CudaStaging> staging);
  // A read staged through pinned stand-ins: its bytes go on to the device as each answer lands
  // (landed()), not all at the end.
  bool lands_on_device() const noexcept;
  void landed(const void* host, std::size_t length) const noexcept;
  // Of the remote metadata, what transports need once started (key and token are key() and
  // token(); the offers were chosen from at the start). Kept alone: the rest, copied per
  // operation, cost a small READ several allocations.
  const RemoteTarget& remote() const noexcept { return remote_; }
  // What the transports move and what its requests carry: a one-shot operation's pairs its
  // descriptors one to one with the remote ones; a transfer between pools sets its own
  // (pool/), before it starts and before stage_through.
  const TransferRequest& request() const noexcept { return request_; }
  void set_request(TransferRequest request) { request_ = std::move(request); }
  // The GPU memory that the owner copies through CUDA IPC (TransferRequest::cuda_ipc): a one-shot
  // operation's on one host (its local() are then device memory) is set before it starts.
  void copy_through_cuda_ipc(std::shared_ptr<const GpuPoolMemory> gpu) {
    request_.cuda_ipc = std::move(gpu);
  }
  const GpuPoolMemory* cuda_ipc() const noexcept { return request_.cuda_ipc.get(); }
  const Id128& key() const noexcept { return key_; }
  const Id128& token() const noexcept { return token_; }
  // Guards the local buffers: a transport pins it while it moves bytes in or out of them.
  AccessGate& gate() noexcept { return gate_; }

  // How the transport tells the passive side that this transfer failed or was cancelled.
  void set_failure_notifier(std::function<void(const Error&)> notifier);

  void succeed();
  // Errors the operation, refuses new access to the local buffers and tells the passive side.
  // Never waits for access in progress (cancel() and abandon() do): safe on transport threads.
  void fail(Error error);

  // The reason (empty: "cancelled by the active side") is what the passive side hears.
  void cancel(std::string reason) override;
  void abandon() override;

 private:
  void stop(OperationStatus status, Error error);
  void notify_passive_side(const Error& error);

  std::vector<Descriptor> local_;
  const RemoteTarget remote_;
  const Id128 key_;
  const Id128 token_;
  const std::chrono::milliseconds grace_;
  AccessGate gate_;
  std::mutex notifier_mutex_;
  std::function<void(const Error&)> notify_failure_;
  std::shared_ptr<const CudaStaging> staging_;
  TransferRequest request_;
};

}  // namespace memwire::detail
