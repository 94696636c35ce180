#include "memwire/metadata.hpp"

#include <initializer_list>
#include <nlohmann/json.hpp>

#include "ids.hpp"
#include "memwire/error.hpp"

namespace memwire {
namespace {

using nlohmann::json;

// Where a value sits in the document. Spelled out only when something is wrong with it: a
// valid document is parsed on every by-name fetch, and building paths cost as much as parsing.
struct Path {
  const Path* parent = nullptr;
  std::string_view name;  // a field's name; empty for an array element
  std::size_t index = 0;

  Path field(std::string_view child) const { return {this, child, 0}; }
  Path element(std::size_t position) const { return {this, {}, position}; }
  std::string str() const {
    if (parent == nullptr) return std::string(name);
    auto head = parent->str();
    if (name.empty()) return head + "[" + std::to_string(index) + "]";
    return head.empty() ? std::string(name) : head + "." + std::string(name);
  }
};

[[noreturn]] void invalid(const Path& where, const std::string& why) {
  throw Error(ErrorCode::InvalidMetadata, "field '" + where.str() + "': " + why);
}

// Rejects fields we do not know: a typo or a foreign document must not pass silently.
void only_fields(const json& object, const Path& where,
                 std::initializer_list<std::string_view> allowed) {
  if (!object.is_object()) invalid(where, "must be an object");
  for (const auto& [name, value] : object.items()) {
    bool known = false;
    for (auto field : allowed) known = known || field == name;
    if (!known) invalid(where.field(name), "unknown field");
  }
}

const json& required(const json& object, const Path& where) {
  auto it = object.find(where.name);
  if (it == object.end()) invalid(where, "missing");
  return *it;
}

std::string string_field(const json& object, const Path& where, bool allow_empty = false) {
  const json& value = required(object, where);
  if (!value.is_string()) invalid(where, "must be a string");
  auto text = value.get<std::string>();
  if (text.empty() && !allow_empty) invalid(where, "must not be empty");
  return text;
}

std::uint64_t unsigned_value(const json& value, const Path& where) {
  if (!value.is_number_unsigned()) invalid(where, "must be a non-negative integer");
  return value.get<std::uint64_t>();
}

std::string id_field(const json& object, const Path& where) {
  auto text = string_field(object, where);
  if (!parse_id(text)) invalid(where, "must be 32 hex digits");
  return text;
}

RemoteDescriptor parse_descriptor(const json& item, const Path& where) {
  only_fields(item, where, {"device", "ptr", "size"});
  RemoteDescriptor descriptor;
  const auto device = where.field("device");
  try {
    descriptor.device = Device::parse(string_field(item, device));
  } catch (const Error& error) {
    if (error.code() == ErrorCode::InvalidMetadata) throw;
    invalid(device, error.what());
  }
  const auto ptr = where.field("ptr"), size = where.field("size");
  descriptor.ptr = unsigned_value(required(item, ptr), ptr);
  descriptor.size = unsigned_value(required(item, size), size);
  if (descriptor.ptr == 0) invalid(ptr, "must not be null");
  if (descriptor.size == 0) invalid(size, "must not be zero");
  if (descriptor.ptr + descriptor.size < descriptor.ptr) invalid(where, "range overflows");
  return descriptor;
}

TransportOffer parse_offer(const json& item, const Path& where) {
  only_fields(item, where, {"name", "address", "keys", "attributes"});
  TransportOffer offer;
  offer.name = string_field(item, where.field("name"));
  offer.address = string_field(item, where.field("address"), true);
  if (auto keys = item.find("keys"); keys != item.end()) {
    const auto path = where.field("keys");
    if (!keys->is_array()) invalid(path, "must be an array");
    for (std::size_t i = 0; i < keys->size(); ++i)
      offer.keys.push_back(unsigned_value((*keys)[i], path.element(i)));
  }
  if (auto attributes = item.find("attributes"); attributes != item.end()) {
    const auto path = where.field("attributes");
    if (!attributes->is_object()) invalid(path, "must be an object");
    for (const auto& [name, value] : attributes->items()) {
      if (!value.is_string()) invalid(path.field(name), "must be a string");
      offer.attributes.emplace(name, value.get<std::string>());
    }
  }
  return offer;
}

Endpoint parse_endpoint(const json& item, const Path& where) {
  only_fields(item, where, {"connector", "host", "transports"});
  Endpoint endpoint;
  endpoint.connector = string_field(item, where.field("connector"));
  endpoint.host = string_field(item, where.field("host"), true);
  const auto path = where.field("transports");
  const json& transports = required(item, path);
  if (!transports.is_array() || transports.empty()) invalid(path, "must be a non-empty array");
  for (std::size_t i = 0; i < transports.size(); ++i)
    endpoint.transports.push_back(parse_offer(transports[i], path.element(i)));
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
  const Path root;
  only_fields(document, root,
              {"version", "operation_kind", "descriptors", "notification_key", "endpoint", "token",
               "expires_at"});

  const auto version = root.field("version");
  if (unsigned_value(required(document, version), version) != kVersion)
    invalid(version, "unsupported (this build speaks " + std::to_string(kVersion) + ")");

  const auto kind = root.field("operation_kind");
  auto kind_value = unsigned_value(required(document, kind), kind);
  if (kind_value != 1 && kind_value != 2) invalid(kind, "must be 1 (read) or 2 (write)");

  const auto items_path = root.field("descriptors");
  const json& items = required(document, items_path);
  if (!items.is_array() || items.empty()) invalid(items_path, "must be a non-empty array");
  std::vector<RemoteDescriptor> descriptors;
  descriptors.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    descriptors.push_back(parse_descriptor(items[i], items_path.element(i)));
    if (descriptors.back().device.kind() != descriptors.front().device.kind())
      invalid(items_path, "all descriptors must share one memory kind");
  }

  auto key = id_field(document, root.field("notification_key"));
  auto endpoint =
      parse_endpoint(required(document, root.field("endpoint")), root.field("endpoint"));
  auto token = id_field(document, root.field("token"));
  const auto expires_path = root.field("expires_at");
  const json& expires = required(document, expires_path);
  if (!expires.is_number_integer() || expires.get<std::int64_t>() < 0)
    invalid(expires_path, "must be a non-negative integer (unix milliseconds, 0 = never)");

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
