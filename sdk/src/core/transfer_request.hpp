#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memwire::detail {

class GpuPoolMemory;
class Registration;

// A run of bytes between local memory and a place in one of the remote side's regions (a
// one-shot operation's descriptor, or a pool's region).
struct TransferSegment {
  std::byte* local;
  std::uint32_t remote_region;
  std::uint64_t remote_offset;
  std::uint64_t length;
  std::uint32_t local_region;  // of TransferRequest::local_registration, when there is one
};

// What requests under a header carry besides their pieces: the generation of the remote
// metadata they were planned against and the transfer's tag (empty: none). The owner admits
// them into memory that many transfers share, and hears of the transfer's end by its tag; so
// its requests keep to one connection (and one rail), in order: the tag reaches the owner
// after the bytes, and the owner knows which connection a tagged transfer was on when it
// broke. Without a header the remote metadata is one operation's: the transfer claims it,
// pairs its segments one to one with that operation's descriptors, and completes it.
struct TransferHeader {
  std::uint64_t generation = 0;
  std::string tag;
};

// What a transport moves and what its requests carry, the same whoever made the transfer
// (core for a one-shot operation, pool/ for a transfer between pools): transports read this,
// never the API behind it. Segment i moves ActiveTransfer::local()[i].
struct TransferRequest {
  std::vector<TransferSegment> segments;
  std::uint64_t bytes = 0;
  std::optional<TransferHeader> header;
  // Local memory registered already, kept alive with the transfer: segments name its regions
  // (local_region), which a transport may register once for all its transfers. Null: the
  // caller's descriptors, registered (verbs) per transfer.
  std::shared_ptr<Registration> local_registration;
  // GPU memory the owner (a same-host peer) copies through CUDA IPC: the segments are device
  // addresses, and requests carry their allocations' handles. Null otherwise.
  std::shared_ptr<const GpuPoolMemory> cuda_ipc;
  // Under a request grant: the owner's windows (verbs keys them), and per segment the one that
  // holds it (kNoWindow: none, the transfer is refused before it begins). Empty otherwise.
  static constexpr std::uint32_t kNoWindow = UINT32_MAX;
  std::size_t grant_windows = 0;
  std::vector<std::uint32_t> segment_windows;
  // Planned against a request grant's metadata: the owner must admit (and fence) every request.
  bool under_grant() const noexcept { return !segment_windows.empty(); }
};

}  // namespace memwire::detail
