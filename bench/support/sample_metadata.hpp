#pragma once

// The metadata every by-name latency figure moves: four 64 KiB descriptors and one TCP offer.
// The raw baselines send these same bytes, so the ratios compare the protocols, not payload
// sizes. Made by the shared test kit (tests/support/metadata_samples.hpp).

#include <cstdint>

#include "memwire/metadata.hpp"
#include "support/metadata_samples.hpp"

namespace memwire::bench {

inline RdmaMetadata sample_metadata(std::uint64_t seed = 1,
                                    OperationKind kind = OperationKind::Read) {
  test_support::MetadataShape shape;
  shape.kind = kind;
  shape.descriptors = 4;
  shape.descriptor_size = 65536;
  shape.host = "bench";
  return test_support::sample_metadata(seed, shape);
}

}  // namespace memwire::bench
