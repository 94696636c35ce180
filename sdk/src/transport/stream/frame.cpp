#include "transport/stream/frame.hpp"

#include <cstdio>

namespace memwire::detail {

std::optional<std::string> frame_header_problem(const FrameHeader& header) {
  if (header.magic != FrameHeader::kMagic) {
    char magic[11];
    std::snprintf(magic, sizeof magic, "0x%08x", static_cast<unsigned>(header.magic));
    return std::string("not a memwire frame (magic ") + magic + ")";
  }
  // Version 2 is a piece request (pool or one-shot) through CUDA IPC, and nothing else.
  const bool cuda_ipc =
      is_piece_request(header.type) && (header.flags & frame_flags::kCudaIpc) != 0;
  if (header.version != (cuda_ipc ? kCudaIpcVersion : FrameHeader::kVersion))
    return "frame version " + std::to_string(header.version) + ", this build speaks " +
           std::to_string(cuda_ipc ? kCudaIpcVersion : FrameHeader::kVersion) +
           (cuda_ipc ? " for CUDA IPC requests" : "");
  const auto type = static_cast<unsigned>(header.type);
  if (type < static_cast<unsigned>(FrameType::Hello) ||
      type > static_cast<unsigned>(kLastFrameType))
    return "unknown frame type " + std::to_string(type);
  return std::nullopt;
}

std::optional<std::string> text_payload_problem(std::uint64_t length) {
  if (length <= FrameHeader::kMaxText) return std::nullopt;
  return "text payload of " + std::to_string(length) + " bytes (at most " +
         std::to_string(FrameHeader::kMaxText) + ")";
}

}  // namespace memwire::detail
