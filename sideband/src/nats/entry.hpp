#pragma once

// The value stored under a name (KV) and sent by a publisher's responder; see nats.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace memwire::sideband::nats_detail {

struct Entry {
  std::int64_t expires_at_ms = 0;  // unix ms, 0 = never
  std::string metadata_json;       // inline metadata; empty when stored in parts
  std::size_t parts = 0;           // > 0: metadata JSON split into `parts` pieces
  std::string part_key;            // pieces live under part_key.0 .. part_key.(parts-1)
  std::size_t size = 0;            // total bytes of the pieces

  bool expired(std::int64_t now_ms) const noexcept {
    return expires_at_ms != 0 && now_ms >= expires_at_ms;
  }
};

std::string encode_inline(std::string_view metadata_json, std::int64_t expires_at_ms);
std::string encode_parts(std::size_t parts, std::string_view part_key, std::size_t size,
                         std::int64_t expires_at_ms);

// Throws Error{InvalidMetadata} naming `name` when `bytes` is neither an envelope nor a JSON
// object (the metadata itself is checked later, by RdmaMetadata::from_json).
Entry decode_entry(std::string_view bytes, std::string_view name);

// The largest metadata document a reassembled entry may have: a bound against a corrupt
// "size" making us allocate without limit.
inline constexpr std::size_t kMaxMetadataBytes = std::size_t{256} << 20;

}  // namespace memwire::sideband::nats_detail
