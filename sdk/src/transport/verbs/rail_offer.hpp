#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "memwire/metadata.hpp"

namespace memwire::detail::verbs {

// A peer's rail as its verbs offer names it: where its listener is. The offer carries no
// remote key: the owner grants keys per connection once a peer presents the token.
struct PeerRail {
  std::string address;
};

// The offer's first rail is its `address` (what a single-rail peer dials); rail N
// (1..kMaxRails-1) is in the attribute "railN" ("ip:port").
void add_rail(TransportOffer& offer, std::size_t rail, const std::string& address);
// Every rail of `offer`; throws Error{InvalidMetadata} on an address that is not ip:port, and
// on keys (an offer of protocol 1, whose keys opened the memory to any peer: not spoken).
std::vector<PeerRail> rails_of(const TransportOffer& offer);

}  // namespace memwire::detail::verbs
