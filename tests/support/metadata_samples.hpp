#pragma once

// Metadata for sideband tests that only carry it by name: valid ids from a seed, one tcp offer,
// `descriptors` of 4 KiB each. Nothing is registered behind it.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "memwire/metadata.hpp"

namespace memwire::test_support {

inline std::string hex32(std::uint64_t seed) {
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(~seed));
  return text;
}

inline RdmaMetadata make_metadata(std::uint64_t seed, OperationKind kind = OperationKind::Read,
                                  std::size_t descriptors = 2) {
  std::vector<RemoteDescriptor> list;
  for (std::size_t i = 0; i < descriptors; ++i) {
    list.push_back(
        RemoteDescriptor{Device{}, 0x7f0000000000ULL + seed * 0x100000 + i * 4096, 4096});
  }
  Endpoint endpoint{hex32(seed + 7), "node-a", {TransportOffer{"tcp", "127.0.0.1:4711", {}, {}}}};
  return RdmaMetadata(kind, std::move(list), hex32(seed), std::move(endpoint), hex32(seed + 1), 0);
}

}  // namespace memwire::test_support
