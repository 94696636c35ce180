#include "support/metadata_samples.hpp"

#include <cstdio>
#include <utility>

namespace memwire::test_support {

std::string hex32(std::uint64_t seed) {
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(~seed));
  return text;
}

RdmaMetadata sample_metadata(std::uint64_t seed, const MetadataShape& shape) {
  const auto stride = shape.stride != 0 ? shape.stride : shape.descriptor_size;
  std::vector<RemoteDescriptor> descriptors;
  descriptors.reserve(shape.descriptors);
  for (std::size_t i = 0; i < shape.descriptors; ++i) {
    descriptors.push_back(RemoteDescriptor{
        Device{}, 0x7f0000000000ULL + seed * 0x100000 + i * stride, shape.descriptor_size});
  }
  Endpoint endpoint{hex32(seed + 7), shape.host, shape.offers};
  return RdmaMetadata({.kind = shape.kind,
                       .descriptors = std::move(descriptors),
                       .notification_key = hex32(seed),
                       .endpoint = std::move(endpoint),
                       .token = hex32(seed + 1),
                       .expires_at_ms = 0});
}

}  // namespace memwire::test_support
