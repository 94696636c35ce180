#include "memwire/metadata.hpp"

#include <array>
#include <cstring>

#include "metadata/canonical_descriptors.hpp"
#include "metadata/endpoint_fields.hpp"
#include "metadata/json_reader.hpp"
#include "util/decimal.hpp"
#include "util/json_writer.hpp"

namespace memwire::detail {
namespace {

// One descriptor as it is read, and the device text of the one before: a KV cache's thousands
// of descriptors name one device, whose text is then parsed once.
struct DescriptorRead {
  RemoteDescriptor descriptor;
  std::string_view device_token;  // raw JSON (quotes included) that gave `device`
  Device device;
};

constexpr Fields<DescriptorRead, 3> kDescriptorFields{{
    {"device", true,
     [](DescriptorRead& read, ondemand::value& value, const Path& path) {
       // The same bytes as a text already parsed give the same device.
       const std::string_view token = value.raw_json_token();
       if (read.device_token.empty() || token != read.device_token) {
         read.device = device_value(value, path);
         read.device_token = token;
       }
       read.descriptor.device = read.device;
     }},
    {"ptr", true,
     [](DescriptorRead& read, ondemand::value& value, const Path& path) {
       read.descriptor.ptr = unsigned_value(value, path);
       if (read.descriptor.ptr == 0) invalid(path, "must not be null");
     }},
    {"size", true,
     [](DescriptorRead& read, ondemand::value& value, const Path& path) {
       read.descriptor.size = unsigned_value(value, path);
       if (read.descriptor.size == 0) invalid(path, "must not be zero");
       if (read.descriptor.size > RdmaMetadata::kMaxTotalSize)
         invalid(path, "must be at most " + std::to_string(RdmaMetadata::kMaxTotalSize) + " bytes");
     }},
}};
static_assert(well_formed(kDescriptorFields));

const RemoteDescriptor& parse_descriptor(ondemand::value& item, const Path& where,
                                         DescriptorRead& read) {
  read.descriptor = RemoteDescriptor{};
  read_object(item, where, kDescriptorFields, read);
  const auto& descriptor = read.descriptor;
  if (descriptor.ptr + descriptor.size < descriptor.ptr) invalid(where, "range overflows");
  return descriptor;
}

// The top-level fields as read, before they become an RdmaMetadata.
struct MetadataRead {
  RdmaMetadata::Fields fields;
  std::uint64_t total_size = 0;  // at most kMaxTotalSize: never wraps
};

constexpr Fields<MetadataRead, 7> kMetadataFields{{
    {"version", true,
     [](MetadataRead&, ondemand::value& value, const Path& path) {
       version_value(value, path, RdmaMetadata::kVersion);
     }},
    {"operation_kind", true,
     [](MetadataRead& read, ondemand::value& value, const Path& path) {
       const auto kind = unsigned_value(value, path);
       if (kind != 1 && kind != 2) invalid(path, "must be 1 (read) or 2 (write)");
       read.fields.kind = static_cast<OperationKind>(kind);
     }},
    {"descriptors", true,
     [](MetadataRead& read, ondemand::value& value, const Path& path) {
       auto& descriptors = read.fields.descriptors;
       DescriptorRead descriptor;
       read_array(value, path, "must be a non-empty array",
                  [&](ondemand::value& item, const Path& at) {
                    if (descriptors.size() == RdmaMetadata::kMaxDescriptors)
                      invalid(path, "more than " + std::to_string(RdmaMetadata::kMaxDescriptors) +
                                        " descriptors");
                    descriptors.push_back(parse_descriptor(item, at, descriptor));
                    if (descriptors.back().device.kind() != descriptors.front().device.kind())
                      invalid(path, "all descriptors must share one memory kind");
                    read.total_size += descriptors.back().size;
                    if (read.total_size > RdmaMetadata::kMaxTotalSize)
                      invalid(path, "sizes add up to more than " +
                                        std::to_string(RdmaMetadata::kMaxTotalSize) + " bytes");
                  });
       if (descriptors.empty()) invalid(path, "must be a non-empty array");
     }},
    {"notification_key", true, read_id<&RdmaMetadata::Fields::notification_key>},
    {"endpoint", true, read_endpoint<&RdmaMetadata::Fields::endpoint>},
    {"token", true, read_id<&RdmaMetadata::Fields::token>},
    {"expires_at", true,
     [](MetadataRead& read, ondemand::value& value, const Path& path) {
       constexpr const char* kExpected =
           "must be a non-negative integer (unix milliseconds, 0 = never)";
       read.fields.expires_at_ms = take(value.get_int64(), path, kExpected);
       if (read.fields.expires_at_ms < 0) invalid(path, kExpected);
     }},
}};
static_assert(well_formed(kMetadataFields));

constexpr std::size_t kDescriptorsRow = row_of(kMetadataFields, "descriptors");
static_assert(kDescriptorsRow < kMetadataFields.size());

RdmaMetadata parse_metadata(std::string_view text, const Path& root) {
  // A descriptor list written as to_json writes it is read without simdjson, which then reads
  // the other fields: '{' and the text after the list (canonical_descriptors.hpp).
  MetadataRead read;
  std::array<bool, kMetadataFields.size()> seen{};
  std::string_view head, body = text;
  if (auto canonical = read_canonical_descriptors(text);
      canonical && (canonical->rest.starts_with(',') || canonical->rest.starts_with('}'))) {
    read.fields.descriptors = std::move(canonical->descriptors);
    read.total_size = canonical->total_size;
    seen[kDescriptorsRow] = true;
    head = "{";
    body = canonical->rest.substr(canonical->rest.starts_with(',') ? 1 : 0);
  }
  JsonText json(head, body, root, RdmaMetadata::kMaxDepth);
  auto top = json.root_object();
  read_object(top, root, kMetadataFields, read, seen);
  json.expect_end();  // the root object must be all there is
  // Keys are per descriptor (verbs rkeys): more than one each is nonsense, and unbounded.
  const auto& transports = read.fields.endpoint.transports;
  for (std::size_t i = 0; i < transports.size(); ++i) {
    if (transports[i].keys.size() > read.fields.descriptors.size())
      invalid(root.field("endpoint").field("transports").element(i).field("keys"),
              "more keys than descriptors");
  }
  return RdmaMetadata(std::move(read.fields));
}

}  // namespace
}  // namespace memwire::detail

namespace memwire {

std::uint64_t RdmaMetadata::total_size() const noexcept {
  std::uint64_t total = 0;
  for (const auto& descriptor : fields_.descriptors) total += descriptor.size;
  return total;
}

RdmaMetadata RdmaMetadata::from_json(std::string_view text) {
  const auto root = detail::Path::root(detail::kOneShotDocument);
  return detail::read_document(text, root, kMaxDepth, "version", kVersion,
                               [&] { return detail::parse_metadata(text, root); });
}

// The keys in name order, as the document always had them. The descriptors, which a KV cache
// has thousands of, are written directly, a few kilobytes at a time, and exactly as
// read_canonical_descriptors reads them back quickly.
std::string RdmaMetadata::to_json() const {
  const auto& descriptors = fields_.descriptors;
  std::string out;
  out.reserve(256 + descriptors.size() * 56);
  out += "{\"descriptors\":[";
  // Up to the pointer's digits; a device's name has no characters that JSON escapes.
  std::string head;
  Device device;
  // Descriptors are written into `batch`, which is appended when it may not hold another.
  char batch[4096];
  std::size_t used = 0;
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    const auto& d = descriptors[i];
    if (i == 0 || d.device != device) {
      device = d.device;
      head = "{\"device\":\"" + device.to_string() + "\",\"ptr\":";
    }
    constexpr std::string_view kSize = ",\"size\":";
    constexpr std::size_t kMostAfterHead = 1 + 20 + kSize.size() + 20 + 1;
    if (sizeof batch - used < head.size() + kMostAfterHead) {
      out.append(batch, used);
      used = 0;
    }
    char* end = batch + used;
    if (i > 0) *end++ = ',';
    std::memcpy(end, head.data(), head.size());
    end = write_decimal(end + head.size(), d.ptr);
    std::memcpy(end, kSize.data(), kSize.size());
    end = write_decimal(end + kSize.size(), d.size);
    *end++ = '}';
    used = static_cast<std::size_t>(end - batch);
  }
  out.append(batch, used);
  out += "],";
  JsonWriter json(out);  // the root object's other fields
  json.key("endpoint");
  detail::write_endpoint(json, fields_.endpoint);
  json.key("expires_at").value(fields_.expires_at_ms);
  json.key("notification_key").value(fields_.notification_key);
  json.key("operation_kind").value(static_cast<int>(fields_.kind));
  json.key("token").value(fields_.token);
  json.key("version").value(kVersion);
  out += '}';
  return out;
}

}  // namespace memwire
