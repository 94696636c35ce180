#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/active_transfer.hpp"

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

// A one-shot operation's local descriptors pair by index with the remote ones.
std::vector<BlockSegment> one_shot_segments(const ActiveTransfer& transfer);

// Runs of at least `chunk_size` go in chunks of that size, one request each, spread over the
// pooled connections; smaller ones are gathered into piece requests of up to `chunk_size`
// bytes and kMaxFramePieces pieces, so many small blocks cost a few requests.
std::vector<Request> plan_requests(const std::vector<BlockSegment>& segments,
                                   std::uint64_t chunk_size);

}  // namespace memwire::detail
