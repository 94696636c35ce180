#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "transport/stream/frame.hpp"

namespace memwire::detail {

// A peer's GPU allocation as this process reaches it: opened through its IPC handle (or, for a
// peer in this very process, its own address), with the size the driver gives it.
struct OpenedAllocation {
  std::byte* base = nullptr;
  std::uint64_t size = 0;
};
// Opens one entry of a request's allocation table; throws Error saying why it cannot.
using OpenAllocation = std::function<OpenedAllocation(const FrameIpcAllocation&)>;

// Where each piece of a kCudaIpc request lies in this process, checked before any byte moves:
// its `reserved` names an entry of `table`, that entry opens, the opened allocation has the size
// the peer said, and the piece lies inside it. A peer's handle is hostile input: anything else
// throws Error{Protocol} naming what is wrong (the owner then closes the connection). Each entry
// the pieces use is opened once.
std::vector<std::byte*> place_ipc_pieces(std::span<const FramePiece> pieces,
                                         std::span<const FrameIpcAllocation> table,
                                         const OpenAllocation& open);

}  // namespace memwire::detail
