#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/transfer_request.hpp"

namespace memwire::detail {

// How a transfer's bytes are cut into stream requests.

// One run of bytes: local memory and where it goes in (or comes from) the remote.
struct Piece {
  std::byte* local;
  std::uint32_t index;  // the remote descriptor (region)
  std::uint64_t offset, length;
};
// One request: a chunk of a large run, or small runs gathered together.
struct Request {
  std::vector<Piece> pieces;
  std::uint64_t length = 0;
};

// Runs of at least `chunk_size` go in chunks of that size, one request each, spread over the
// pooled connections; smaller ones are gathered into piece requests of up to `chunk_size`
// bytes and kMaxFramePieces pieces, so many small blocks cost a few requests.
std::vector<Request> plan_requests(const std::vector<TransferSegment>& segments,
                                   std::uint64_t chunk_size);

// Where a request's bytes travel, and who moves them.

// Below this, a same-host chunk travels on the socket: pinning the other process's pages for
// process_vm_readv/writev, or a mapping's extra notice round trip, costs more than copying a
// few pages through the kernel. Measured, 1 READ at a time, GB/s socket / cross-memory /
// mapped: 64 KiB 2.37 / 1.80 / 1.18; 128 KiB 2.91 / 3.01 / 2.34; 256 KiB - / 4.81 / 4.77.
inline constexpr std::uint64_t kCrossMemoryMinimum = 128 << 10;

// A one-request operation up to this size may be read by the thread that waits for it (see
// WaitDriver): one wake-up instead of two is a large part of a small READ's time. Fan-in of
// 8 x 1 MiB, the waiter reading one of them itself: round p50 2.17 -> 2.37 ms (9 alternating
// rounds, ranges overlapping): no gain there, so the loop reads the large ones.
inline constexpr std::uint64_t kMostBytesForWaiterToRead = 64 << 10;
// A pool write with at least this much to send through the socket is sent by the loop: the
// caller of write_blocks goes on at once (a layer stream's next compute) instead of paying the
// socket's copy, and over loopback the peer's receive too (issue 35: a 512 KiB layer's
// write_blocks took 130-250 us of prefill's thread, 9-30 us once the loop sent it). Below it, a
// wake-up of the loop costs about what the copy does.
inline constexpr std::uint64_t kLoopSendsFrom = 64 << 10;

// Cross-memory (the owner copies, or maps and the reader copies) for a request to a peer on this
// host (`same_host`: the transport's cross-memory setting) large enough to repay it.
inline bool travels_cross_memory(bool same_host, std::uint64_t length) {
  return same_host && length >= kCrossMemoryMinimum;
}

// What of `requests` travels in the socket itself.
std::uint64_t socket_bytes(const std::vector<Request>& requests, bool same_host);

}  // namespace memwire::detail
