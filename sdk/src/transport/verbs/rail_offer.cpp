#include "transport/verbs/rail_offer.hpp"

#include <charconv>

#include "memwire/error.hpp"
#include "transport/verbs/ipv4_endpoint.hpp"
#include "transport/verbs/verbs_device.hpp"

namespace memwire::detail::verbs {
namespace {

std::vector<std::uint32_t> rkeys_of(const std::vector<std::uint64_t>& keys, std::size_t descriptors,
                                    const std::string& rail) {
  if (keys.size() != descriptors)
    throw Error(ErrorCode::InvalidMetadata, "verbs offer " + rail + " has " +
                                                std::to_string(keys.size()) + " keys for " +
                                                std::to_string(descriptors) + " descriptors");
  std::vector<std::uint32_t> rkeys;
  for (auto key : keys) {
    if (key > UINT32_MAX)
      throw Error(ErrorCode::InvalidMetadata,
                  "verbs key " + std::to_string(key) + " is not an rkey");
    rkeys.push_back(static_cast<std::uint32_t>(key));
  }
  return rkeys;
}

std::vector<std::uint64_t> parse_keys(const std::string& text, std::size_t descriptors,
                                      const std::string& rail) {
  std::vector<std::uint64_t> keys;
  const char* at = text.data();
  const char* end = at + text.size();
  while (at < end && keys.size() <= descriptors) {
    std::uint64_t key = 0;
    auto [next, error] = std::from_chars(at, end, key);
    if (error != std::errc() || (next != end && *next != ','))
      throw Error(ErrorCode::InvalidMetadata, "verbs offer " + rail + "_keys is not a key list");
    keys.push_back(key);
    at = next == end ? end : next + 1;
  }
  return keys;
}

}  // namespace

void add_rail(TransportOffer& offer, std::size_t rail, const std::string& address,
              const std::vector<std::uint64_t>& keys) {
  if (rail == 0) {
    offer.address = address;
    offer.keys = keys;
    return;
  }
  std::string text;
  for (auto key : keys) text += (text.empty() ? "" : ",") + std::to_string(key);
  const auto name = "rail" + std::to_string(rail);
  offer.attributes[name] = address;
  offer.attributes[name + "_keys"] = text;
}

std::vector<PeerRail> rails_of(const TransportOffer& offer, std::size_t descriptors) {
  std::vector<PeerRail> rails{{offer.address, rkeys_of(offer.keys, descriptors, "rail0")}};
  for (std::size_t rail = 1; rail < kMaxRails; ++rail) {
    const auto name = "rail" + std::to_string(rail);
    auto address = offer.attributes.find(name);
    auto keys = offer.attributes.find(name + "_keys");
    if (address == offer.attributes.end() || keys == offer.attributes.end()) break;
    if (!parse_ipv4_endpoint(address->second))
      throw Error(ErrorCode::InvalidMetadata,
                  "verbs offer " + name + " '" + address->second + "' is not ip:port");
    rails.push_back({address->second,
                     rkeys_of(parse_keys(keys->second, descriptors, name), descriptors, name)});
  }
  return rails;
}

}  // namespace memwire::detail::verbs
