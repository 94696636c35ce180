#include "transport/verbs/rail_offer.hpp"

#include "memwire/error.hpp"
#include "transport/verbs/ipv4_endpoint.hpp"
#include "transport/verbs/verbs_device.hpp"

namespace memwire::detail::verbs {

void add_rail(TransportOffer& offer, std::size_t rail, const std::string& address) {
  if (rail == 0)
    offer.address = address;
  else
    offer.attributes["rail" + std::to_string(rail)] = address;
}

std::vector<PeerRail> rails_of(const TransportOffer& offer) {
  if (!offer.keys.empty())
    throw Error(ErrorCode::InvalidMetadata,
                "verbs offer carries remote keys: an owner of an older memwire (verbs protocol "
                "1), which this one does not speak");
  if (!parse_ipv4_endpoint(offer.address))
    throw Error(ErrorCode::InvalidMetadata,
                "verbs offer address '" + offer.address + "' is not ip:port");
  std::vector<PeerRail> rails{{offer.address}};
  for (std::size_t rail = 1; rail < kMaxRails; ++rail) {
    const auto name = "rail" + std::to_string(rail);
    auto address = offer.attributes.find(name);
    if (address == offer.attributes.end()) break;
    if (!parse_ipv4_endpoint(address->second))
      throw Error(ErrorCode::InvalidMetadata,
                  "verbs offer " + name + " '" + address->second + "' is not ip:port");
    rails.push_back({address->second});
  }
  return rails;
}

}  // namespace memwire::detail::verbs
