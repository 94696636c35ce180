#include "transport/stream/cuda_ipc_pieces.hpp"

#include <optional>

#include "memwire/error.hpp"

namespace memwire::detail {

std::vector<std::byte*> place_ipc_pieces(std::span<const FramePiece> pieces,
                                         std::span<const FrameIpcAllocation> table,
                                         const OpenAllocation& open) {
  std::vector<std::optional<OpenedAllocation>> opened(table.size());
  std::vector<std::byte*> places;
  places.reserve(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto& piece = pieces[i];
    const auto which = "CUDA IPC piece " + std::to_string(i);
    if (piece.reserved >= table.size())
      throw Error(ErrorCode::Protocol, which + " names allocation " +
                                           std::to_string(piece.reserved) + " of " +
                                           std::to_string(table.size()));
    const auto& entry = table[piece.reserved];
    auto& allocation = opened[piece.reserved];
    if (!allocation) {
      try {
        allocation = open(entry);
      } catch (const Error& error) {
        throw Error(ErrorCode::Protocol, "CUDA IPC allocation " + std::to_string(piece.reserved) +
                                             ": the peer's handle does not open here (" +
                                             error.what() + ")");
      }
      if (allocation->size != entry.size)
        throw Error(ErrorCode::Protocol, "CUDA IPC allocation " + std::to_string(piece.reserved) +
                                             ": the peer says " + std::to_string(entry.size) +
                                             " bytes, the opened allocation has " +
                                             std::to_string(allocation->size));
    }
    // Inside [base, base + size), without wrapping around.
    if (piece.peer_address < entry.base || piece.length > entry.size ||
        piece.peer_address - entry.base > entry.size - piece.length)
      throw Error(ErrorCode::Protocol,
                  which + " (" + std::to_string(piece.length) + " bytes at offset " +
                      std::to_string(piece.peer_address - entry.base) +
                      ") lies outside its allocation of " + std::to_string(entry.size) + " bytes");
    places.push_back(allocation->base + (piece.peer_address - entry.base));
  }
  return places;
}

}  // namespace memwire::detail
