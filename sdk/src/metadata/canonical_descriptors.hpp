#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "memwire/metadata.hpp"

namespace memwire {

// The descriptor list read from the start of a metadata text.
struct CanonicalDescriptors {
  std::vector<RemoteDescriptor> descriptors;
  std::uint64_t total_size = 0;
  std::string_view rest;  // the text after the list's closing ']'
};

// Reads `{"descriptors":[...]` at the start of `text` without a JSON parser, when every
// descriptor is written exactly as RdmaMetadata::to_json writes it (no spaces, fields in its
// order, plain digits and device names) and passes every check RdmaMetadata::from_json makes.
// A KV cache's metadata has thousands of descriptors: a general parser's work per field is
// most of a fetch's. Anything else is nullopt: the general parser then reads the whole text
// and says what is wrong with it.
std::optional<CanonicalDescriptors> read_canonical_descriptors(std::string_view text);

}  // namespace memwire
