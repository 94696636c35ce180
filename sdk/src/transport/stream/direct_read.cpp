#include "transport/stream/direct_read.hpp"

#include <cerrno>
#include <vector>

#include "util/test_hooks.hpp"

namespace memwire::detail {
namespace {

bool qualifies(const ActiveTransfer& transfer) {
  const auto& request = transfer.request();
  return transfer.kind() == OperationKind::Read && request.header && request.header->tag.empty() &&
         !request.under_grant() && !request.cuda_ipc && !transfer.lands_on_device();
}

}  // namespace

bool read_directly(ActiveTransfer& transfer, OutboundConnection& connection, SameHost& same_host) {
  const int owner = connection.direct_reads_from();
  // A connection gone may mean its process is too, and its number another process's now.
  if (owner == 0 || !qualifies(transfer) || !connection.alive()) return false;
  const auto& spans = transfer.remote().spans;
  const auto& segments = transfer.request().segments;
  std::vector<iovec> theirs, ours;
  theirs.reserve(segments.size());
  ours.reserve(segments.size());
  for (const auto& segment : segments) {
    if (segment.remote_region >= spans.size()) return false;
    const auto& span = spans[segment.remote_region];
    // Device memory is the owner's to copy (CUDA IPC, staging): no process_vm_readv reaches it.
    if (span.device.kind() == DeviceKind::Cuda) return false;
    if (segment.remote_offset > span.size || segment.length > span.size - segment.remote_offset)
      return false;
    theirs.push_back({reinterpret_cast<void*>(span.ptr + segment.remote_offset),
                      static_cast<std::size_t>(segment.length)});
    ours.push_back({segment.local, static_cast<std::size_t>(segment.length)});
  }
  auto pin = transfer.gate().pin();  // the caller's blocks stay until the copy ended
  if (!pin) return false;            // cancelled already: the usual path says so
  const int refused = same_host.read_directly(owner, theirs, ours);
  pin.reset();
  if (refused == 0) {
    test_hooks::direct_reads.fetch_add(1, std::memory_order_relaxed);
    transfer.succeed();
    return true;
  }
  // Not ours to read after all (the owner undumpable, or another process now): ask from now on.
  // An address it does not map (EFAULT: a pool closed, say) is the owner's to explain.
  if (refused == EPERM || refused == ESRCH) connection.stop_direct_reads();
  return false;
}

}  // namespace memwire::detail
