#include "transport/stream/request_plan.hpp"

#include <algorithm>
#include <utility>

#include "transport/stream/frame.hpp"

namespace memwire::detail {

std::vector<Request> plan_requests(const std::vector<TransferSegment>& segments,
                                   std::uint64_t chunk_size) {
  std::vector<Request> requests;
  Request gathering;
  for (const auto& segment : segments) {
    const std::uint64_t size = segment.length;
    if (size >= chunk_size) {
      for (std::uint64_t offset = 0; offset < size; offset += chunk_size) {
        const auto length = std::min(chunk_size, size - offset);
        requests.push_back({{{segment.local + offset, segment.remote_region,
                              segment.remote_offset + offset, length}},
                            length});
      }
      continue;
    }
    if (gathering.pieces.size() == kMaxFramePieces || gathering.length + size > chunk_size)
      requests.push_back(std::exchange(gathering, {}));
    gathering.pieces.push_back({segment.local, segment.remote_region, segment.remote_offset, size});
    gathering.length += size;
  }
  if (!gathering.pieces.empty()) requests.push_back(std::move(gathering));
  return requests;
}

std::uint64_t socket_bytes(const std::vector<Request>& requests, bool same_host) {
  std::uint64_t bytes = 0;
  for (const auto& request : requests)
    if (!travels_cross_memory(same_host, request.length)) bytes += request.length;
  return bytes;
}

}  // namespace memwire::detail
