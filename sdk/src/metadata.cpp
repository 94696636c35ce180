#include "memwire/metadata.hpp"

#include <initializer_list>
#include <nlohmann/json.hpp>

#include "ids.hpp"
#include "memwire/error.hpp"

namespace memwire {
namespace {

using nlohmann::json;

[[noreturn]] void invalid(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::InvalidMetadata, "field '" + field + "': " + why);
}

// Rejects fields we do not know: a typo or a foreign document must not pass silently.
void only_fields(const json& object, const std::string& where,
                 std::initializer_list<std::string_view> allowed) {
  if (!object.is_object()) invalid(where, "must be an object");
  for (const auto& [name, value] : object.items()) {
    bool known = false;
    for (auto field : allowed) known = known || field == name;
    if (!known) invalid(where.empty() ? name : where + "." + name, "unknown field");
  }
}

const json& required(const json& object, const std::string& where, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) invalid(where.empty() ? name : where + "." + name, "missing");
  return *it;
}

std::string string_field(const json& object, const std::string& where, const char* name,
                         bool allow_empty = false) {
  const json& value = required(object, where, name);
  const std::string path = where.empty() ? name : where + "." + name;
  if (!value.is_string()) invalid(path, "must be a string");
  auto text = value.get<std::string>();
  if (text.empty() && !allow_empty) invalid(path, "must not be empty");
  return text;
}

std::uint64_t unsigned_value(const json& value, const std::string& path) {
  if (!value.is_number_unsigned()) invalid(path, "must be a non-negative integer");
  return value.get<std::uint64_t>();
}

std::string id_field(const json& object, const char* name) {
  auto text = string_field(object, "", name);
  if (!parse_id(text)) invalid(name, "must be 32 hex digits");
  return text;
}

RemoteDescriptor parse_descriptor(const json& item, const std::string& path) {
  only_fields(item, path, {"device", "ptr", "size"});
  RemoteDescriptor descriptor;
  try {
    descriptor.device = Device::parse(string_field(item, path, "device"));
  } catch (const Error& error) {
    invalid(path + ".device", error.what());
  }
  descriptor.ptr = unsigned_value(required(item, path, "ptr"), path + ".ptr");
  descriptor.size = unsigned_value(required(item, path, "size"), path + ".size");
  if (descriptor.ptr == 0) invalid(path + ".ptr", "must not be null");
  if (descriptor.size == 0) invalid(path + ".size", "must not be zero");
  if (descriptor.ptr + descriptor.size < descriptor.ptr) invalid(path, "range overflows");
  return descriptor;
}

TransportOffer parse_offer(const json& item, const std::string& path) {
  only_fields(item, path, {"name", "address", "keys", "attributes"});
  TransportOffer offer;
  offer.name = string_field(item, path, "name");
  offer.address = string_field(item, path, "address", true);
  if (auto keys = item.find("keys"); keys != item.end()) {
    if (!keys->is_array()) invalid(path + ".keys", "must be an array");
    for (const auto& key : *keys) offer.keys.push_back(unsigned_value(key, path + ".keys[]"));
  }
  if (auto attributes = item.find("attributes"); attributes != item.end()) {
    if (!attributes->is_object()) invalid(path + ".attributes", "must be an object");
    for (const auto& [name, value] : attributes->items()) {
      if (!value.is_string()) invalid(path + ".attributes." + name, "must be a string");
      offer.attributes.emplace(name, value.get<std::string>());
    }
  }
  return offer;
}

Endpoint parse_endpoint(const json& item) {
  only_fields(item, "endpoint", {"connector", "host", "transports"});
  Endpoint endpoint;
  endpoint.connector = string_field(item, "endpoint", "connector");
  endpoint.host = string_field(item, "endpoint", "host", true);
  const json& transports = required(item, "endpoint", "transports");
  if (!transports.is_array() || transports.empty())
    invalid("endpoint.transports", "must be a non-empty array");
  for (std::size_t i = 0; i < transports.size(); ++i)
    endpoint.transports.push_back(
        parse_offer(transports[i], "endpoint.transports[" + std::to_string(i) + "]"));
  return endpoint;
}

}  // namespace

RdmaMetadata::RdmaMetadata(OperationKind kind, std::vector<RemoteDescriptor> descriptors,
                           std::string notification_key, Endpoint endpoint, std::string token,
                           std::int64_t expires_at_ms)
    : kind_(kind),
      descriptors_(std::move(descriptors)),
      notification_key_(std::move(notification_key)),
      endpoint_(std::move(endpoint)),
      token_(std::move(token)),
      expires_at_ms_(expires_at_ms) {}

std::uint64_t RdmaMetadata::total_size() const noexcept {
  std::uint64_t total = 0;
  for (const auto& descriptor : descriptors_) total += descriptor.size;
  return total;
}

RdmaMetadata RdmaMetadata::from_json(std::string_view text) {
  json document;
  try {
    document = json::parse(text);
  } catch (const json::exception& error) {
    throw Error(ErrorCode::InvalidMetadata, std::string("not JSON: ") + error.what());
  }
  only_fields(document, "", {"version", "operation_kind", "descriptors", "notification_key",
                             "endpoint", "token", "expires_at"});

  if (unsigned_value(required(document, "", "version"), "version") != kVersion)
    invalid("version", "unsupported (this build speaks " + std::to_string(kVersion) + ")");

  auto kind_value = unsigned_value(required(document, "", "operation_kind"), "operation_kind");
  if (kind_value != 1 && kind_value != 2) invalid("operation_kind", "must be 1 (read) or 2 (write)");

  const json& items = required(document, "", "descriptors");
  if (!items.is_array() || items.empty()) invalid("descriptors", "must be a non-empty array");
  std::vector<RemoteDescriptor> descriptors;
  descriptors.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    descriptors.push_back(parse_descriptor(items[i], "descriptors[" + std::to_string(i) + "]"));
    if (descriptors.back().device.kind() != descriptors.front().device.kind())
      invalid("descriptors", "all descriptors must share one memory kind");
  }

  auto key = id_field(document, "notification_key");
  auto endpoint = parse_endpoint(required(document, "", "endpoint"));
  auto token = id_field(document, "token");
  const json& expires = required(document, "", "expires_at");
  if (!expires.is_number_integer() || expires.get<std::int64_t>() < 0)
    invalid("expires_at", "must be a non-negative integer (unix milliseconds, 0 = never)");

  return RdmaMetadata(static_cast<OperationKind>(kind_value), std::move(descriptors),
                      std::move(key), std::move(endpoint), std::move(token),
                      expires.get<std::int64_t>());
}

std::string RdmaMetadata::to_json() const {
  json descriptors = json::array();
  for (const auto& d : descriptors_)
    descriptors.push_back({{"device", d.device.to_string()}, {"ptr", d.ptr}, {"size", d.size}});
  json transports = json::array();
  for (const auto& offer : endpoint_.transports) {
    json item = {{"name", offer.name}, {"address", offer.address}};
    if (!offer.keys.empty()) item["keys"] = offer.keys;
    if (!offer.attributes.empty()) item["attributes"] = offer.attributes;
    transports.push_back(std::move(item));
  }
  json document = {
      {"version", kVersion},
      {"operation_kind", static_cast<int>(kind_)},
      {"descriptors", std::move(descriptors)},
      {"notification_key", notification_key_},
      {"endpoint",
       {{"connector", endpoint_.connector}, {"host", endpoint_.host}, {"transports", transports}}},
      {"token", token_},
      {"expires_at", expires_at_ms_},
  };
  return document.dump();
}

}  // namespace memwire
