#pragma once

// Metadata that only travels (by name, over a pipe, into a parser): valid ids from a seed,
// descriptors at made-up addresses, a tcp offer. Nothing is registered behind it. Tests and the
// benchmarks all make theirs here, each with the shape it needs.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memwire/metadata.hpp"

namespace memwire::test_support {

// 32 hex digits from a seed: a valid notification key, token or connector id.
std::string hex32(std::uint64_t seed);

struct MetadataShape {
  OperationKind kind = OperationKind::Read;
  std::size_t descriptors = 2;
  std::uint64_t descriptor_size = 4096;
  // From one descriptor's start to the next; 0 = descriptor_size (back to back). Larger leaves
  // gaps, as a KV cache's blocks have.
  std::uint64_t stride = 0;
  std::string host = "node-a";
  std::vector<TransportOffer> offers = {TransportOffer{"tcp", "127.0.0.1:4711", {}, {}}};
};

// Key hex32(seed), token hex32(seed + 1), connector hex32(seed + 7); descriptors from
// 0x7f0000000000 + seed MiB, so different seeds give different metadata throughout.
RdmaMetadata sample_metadata(std::uint64_t seed, const MetadataShape& shape);

inline RdmaMetadata sample_metadata(std::uint64_t seed, OperationKind kind = OperationKind::Read,
                                    std::size_t descriptors = 2) {
  MetadataShape shape;
  shape.kind = kind;
  shape.descriptors = descriptors;
  return sample_metadata(seed, shape);
}

}  // namespace memwire::test_support
