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
#include "memwire/descriptor.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

// The core of an active operation: local descriptors paired by index with the remote ones.
// A transport moves the bytes from its own threads, then calls succeed() or fail().
class CudaStaging;
class GpuPoolMemory;
class Registration;

// A transfer between two pools: runs of bytes between local memory and a remote region,
// coalesced from the block pairs, and the tag that follows them.
struct BlockSegment {
  std::byte* local;
  std::uint32_t remote_region;
  std::uint64_t remote_offset;
  std::uint64_t length;
  std::uint32_t local_region;  // of the local pool: what verbs registers for it, once
};
struct BlockPlan {
  std::vector<BlockSegment> segments;
  std::uint64_t bytes = 0;
  std::string tag;                           // empty: no notification
  std::uint64_t generation = 0;              // of the remote pool's metadata
  std::shared_ptr<Registration> local_pool;  // kept alive while the transfer is
  // The local pool's GPU memory when the owner (a same-host pool in GPU memory) copies it
  // through CUDA IPC: the segments are device addresses, and requests carry their allocations'
  // handles. Null otherwise (GPU memory is then staged through pinned host memory).
  std::shared_ptr<const GpuPoolMemory> cuda_ipc;
  // Under a request grant's metadata (verbs): the owner's windows, and per segment the one that
  // holds it (kNoWindow: none, the transfer is refused before it begins). Empty otherwise.
  static constexpr std::uint32_t kNoWindow = UINT32_MAX;
  std::size_t grant_windows = 0;
  std::vector<std::uint32_t> segment_windows;
};

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
  // A transfer between pools: `local` are the runs of its plan (see move_blocks), moved to and
  // from the remote pool's regions.
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
  // A transfer between pools (set before it starts), or null for a one-shot operation.
  void move_blocks(BlockPlan plan) { blocks_ = std::make_unique<const BlockPlan>(std::move(plan)); }
  const BlockPlan* blocks() const noexcept { return blocks_.get(); }
  // The GPU memory that the owner copies through CUDA IPC: a pool transfer's (see BlockPlan)
  // or a one-shot operation's on one host (its local() are then device memory). Null when
  // nothing goes through CUDA IPC. A one-shot's is set before the transfer starts.
  void copy_through_cuda_ipc(std::shared_ptr<const GpuPoolMemory> gpu) {
    cuda_ipc_ = std::move(gpu);
  }
  const GpuPoolMemory* cuda_ipc() const noexcept {
    return blocks_ ? blocks_->cuda_ipc.get() : cuda_ipc_.get();
  }
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
  std::unique_ptr<const BlockPlan> blocks_;
  std::shared_ptr<const GpuPoolMemory> cuda_ipc_;  // a one-shot operation's (see cuda_ipc())
};

}  // namespace memwire::detail
