#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memwire/export.hpp"  // MEMWIRE_API: exported for the VerbsRails tests
#include "memwire/metadata.hpp"

namespace memwire::detail::verbs {

// A peer's rail as its verbs offer names it: where its listener is, and the rkeys of the
// operation's descriptors on that device.
struct PeerRail {
  std::string address;
  std::vector<std::uint32_t> rkeys;
};

// The offer's first rail is its `address` and `keys` (what a single-rail peer reads); rail N
// (1..kMaxRails-1) is in the attributes "railN" ("ip:port") and "railN_keys" ("k,k,...").
MEMWIRE_API void add_rail(TransportOffer& offer, std::size_t rail, const std::string& address,
                          const std::vector<std::uint64_t>& keys);
// Every rail of `offer`, each with one rkey per descriptor; throws Error{InvalidMetadata}.
MEMWIRE_API std::vector<PeerRail> rails_of(const TransportOffer& offer, std::size_t descriptors);

}  // namespace memwire::detail::verbs
