#pragma once

#include <nlohmann/json.hpp>

#include "memwire/metadata.hpp"

namespace memwire::detail {

// An endpoint as both kinds of metadata write it: connector, host, and the transports with
// their keys and attributes only when they have some.
inline nlohmann::json endpoint_json(const Endpoint& endpoint) {
  nlohmann::json transports = nlohmann::json::array();
  for (const auto& offer : endpoint.transports) {
    nlohmann::json item = {{"name", offer.name}, {"address", offer.address}};
    if (!offer.keys.empty()) item["keys"] = offer.keys;
    if (!offer.attributes.empty()) item["attributes"] = offer.attributes;
    transports.push_back(std::move(item));
  }
  return {{"connector", endpoint.connector}, {"host", endpoint.host}, {"transports", transports}};
}

}  // namespace memwire::detail
