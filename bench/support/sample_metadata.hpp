#pragma once

// The metadata every by-name latency figure moves: a handful of descriptors and one TCP offer,
// the same shape nats_fetch_latency publishes. The raw baselines send these same bytes, so the
// ratios compare the protocols, not payload sizes.

#include <cstdint>
#include <string>
#include <vector>

#include "../../tests/support/metadata_samples.hpp"
#include "memwire/metadata.hpp"

namespace memwire::bench {

using test_support::hex32;

inline RdmaMetadata sample_metadata(std::uint64_t seed = 1) {
  std::vector<RemoteDescriptor> descriptors;
  for (std::uint64_t i = 0; i < 4; ++i) {
    descriptors.push_back(RemoteDescriptor{Device{}, 0x7f0000000000ULL + i * 65536, 65536});
  }
  return RdmaMetadata(
      OperationKind::Read, std::move(descriptors), hex32(seed),
      Endpoint{hex32(seed + 1), "bench", {TransportOffer{"tcp", "127.0.0.1:4711", {}, {}}}},
      hex32(seed + 2), 0);
}

}  // namespace memwire::bench
