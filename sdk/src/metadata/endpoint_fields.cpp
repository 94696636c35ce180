#include "metadata/endpoint_fields.hpp"

namespace memwire::detail {
namespace {

constexpr Fields<TransportOffer, 4> kOfferFields{{
    {"name", true,
     [](TransportOffer& offer, ondemand::value& value, const Path& path) {
       offer.name = string_value(value, path);
     }},
    {"address", true,
     [](TransportOffer& offer, ondemand::value& value, const Path& path) {
       offer.address = string_value(value, path, true);
     }},
    {"keys", false,
     [](TransportOffer& offer, ondemand::value& value, const Path& path) {
       read_array(value, path, "must be an array", [&](ondemand::value& key, const Path& at) {
         offer.keys.push_back(unsigned_value(key, at));
       });
     }},
    {"attributes", false,
     [](TransportOffer& offer, ondemand::value& value, const Path& path) {
       auto attributes = take(value.get_object(), path, "must be an object");
       for (auto entry : attributes) {
         auto attribute = take(std::move(entry), path);
         std::string name(take(attribute.unescaped_key(), path));
         auto text = string_value(attribute.value(), path.field(name), true);
         offer.attributes.insert_or_assign(std::move(name), std::move(text));
       }
     }},
}};
static_assert(well_formed(kOfferFields));

constexpr Fields<Endpoint, 3> kEndpointFields{{
    {"connector", true,
     [](Endpoint& endpoint, ondemand::value& value, const Path& path) {
       endpoint.connector = string_value(value, path);
     }},
    {"host", true,
     [](Endpoint& endpoint, ondemand::value& value, const Path& path) {
       endpoint.host = string_value(value, path, true);
     }},
    {"transports", true,
     [](Endpoint& endpoint, ondemand::value& value, const Path& path) {
       if (read_array(value, path, "must be a non-empty array",
                      [&](ondemand::value& item, const Path& at) {
                        TransportOffer offer;
                        read_object(item, at, kOfferFields, offer);
                        endpoint.transports.push_back(std::move(offer));
                      }) == 0)
         invalid(path, "must be a non-empty array");
     }},
}};
static_assert(well_formed(kEndpointFields));

}  // namespace

Endpoint endpoint_value(ondemand::value& value, const Path& where) {
  Endpoint endpoint;
  read_object(value, where, kEndpointFields, endpoint);
  return endpoint;
}

void write_endpoint(JsonWriter& out, const Endpoint& endpoint) {
  out.begin_object().key("connector").value(endpoint.connector);
  out.key("host").value(endpoint.host).key("transports").begin_array();
  for (const auto& offer : endpoint.transports) {
    out.begin_object().key("address").value(offer.address);
    if (!offer.attributes.empty()) {
      out.key("attributes").begin_object();
      for (const auto& [name, text] : offer.attributes) out.key(name).value(text);
      out.end_object();
    }
    if (!offer.keys.empty()) {
      out.key("keys").begin_array();
      for (const auto key : offer.keys) out.value(key);
      out.end_array();
    }
    out.key("name").value(offer.name).end_object();
  }
  out.end_array().end_object();
}

}  // namespace memwire::detail
