#include "memwire/metadata.hpp"

#include <simdjson.h>

#include <array>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "memwire/error.hpp"
#include "metadata/canonical_descriptors.hpp"
#include "metadata/endpoint_json.hpp"
#include "util/decimal.hpp"
#include "util/ids.hpp"

namespace memwire {
namespace {

using nlohmann::json;
namespace ondemand = simdjson::ondemand;

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

// Text from the document (field names, a parser's "last read" token) in a message: bytes
// outside printable ASCII become \xNN, so that a message is always printable and valid UTF-8
// (an HTTP endpoint dumps it as JSON; a raw 0xff made that throw).
std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

[[noreturn]] void invalid(const Path& where, const std::string& why) {
  throw Error(ErrorCode::InvalidMetadata, "field '" + printable(where.str()) + "': " + why);
}

[[noreturn]] void not_json(simdjson::error_code code) {
  throw Error(ErrorCode::InvalidMetadata,
              std::string("not JSON: ") + simdjson::error_message(code));
}

// Rejects nesting deeper than any metadata has, in one pass and no memory: brackets outside
// strings are counted.
void check_depth(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > RdmaMetadata::kMaxDepth)
        throw Error(ErrorCode::InvalidMetadata,
                    "nested deeper than " + std::to_string(RdmaMetadata::kMaxDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// Reads the whole text as JSON without building it (the error path of from_json): says why
// it is not JSON, or that it nests deeper than any metadata does. Memory stays independent of
// the text's size: a DOM of 16 MB of '[' peaked at ~700 MB.
class ShapeCheck final : public json::json_sax_t {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return deeper(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return shallower(); }
  bool start_array(std::size_t) override { return deeper(); }
  bool end_array() override { return shallower(); }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    problem_ = std::string("not JSON: ") + printable(error.what());
    return false;
  }
  const std::string& problem() const { return problem_; }

 private:
  bool deeper() {
    if (++depth_ <= RdmaMetadata::kMaxDepth) return true;
    problem_ = "nested deeper than " + std::to_string(RdmaMetadata::kMaxDepth) + " levels";
    return false;
  }
  bool shallower() {
    --depth_;
    return true;
  }
  std::size_t depth_ = 0;
  std::string problem_;
};

// The value of `result`; a value of the wrong type or range is `where`'s fault (`expected`
// says what it must be), anything else means the text is not JSON.
template <typename T>
T take(simdjson::simdjson_result<T> result, const Path& where, const char* expected) {
  T value;
  const auto code = std::move(result).get(value);
  if (code == simdjson::SUCCESS) return value;
  if (code == simdjson::INCORRECT_TYPE || code == simdjson::NUMBER_ERROR ||
      code == simdjson::NUMBER_OUT_OF_RANGE)
    invalid(where, expected);
  not_json(code);
}

template <typename T>
T take(simdjson::simdjson_result<T> result) {
  T value;
  if (auto code = std::move(result).get(value); code != simdjson::SUCCESS) not_json(code);
  return value;
}

std::uint64_t unsigned_value(ondemand::value& value, const Path& where) {
  return take(value.get_uint64(), where, "must be a non-negative integer");
}

std::string string_value(ondemand::value& value, const Path& where, bool allow_empty = false) {
  std::string text(take(value.get_string(), where, "must be a string"));
  if (text.empty() && !allow_empty) invalid(where, "must not be empty");
  return text;
}

std::string id_value(ondemand::value& value, const Path& where) {
  auto text = string_value(value, where);
  if (!parse_id(text)) invalid(where, "must be 32 hex digits");
  return text;
}

// One field of a JSON object that the parser reads into a `Target`: its name, whether it must be
// there, and what reads its value. An object's table of these is the only place its fields are
// named: unknown, repeated and missing fields are all checked against it, so a field added to the
// table is read, required and reported with no list or index elsewhere to keep in step.
template <typename Target>
struct Field {
  std::string_view name;
  bool required;
  void (*read)(Target& target, ondemand::value& value, const Path& path);
};

template <typename Target, std::size_t N>
using Fields = std::array<Field<Target>, N>;

// Every field named once and read by something: checked where each table is defined.
template <typename Target, std::size_t N>
constexpr bool well_formed(const Fields<Target, N>& fields) {
  for (std::size_t i = 0; i < N; ++i) {
    if (fields[i].name.empty() || fields[i].read == nullptr) return false;
    for (std::size_t j = i + 1; j < N; ++j)
      if (fields[i].name == fields[j].name) return false;
  }
  return true;
}

// The row of `fields` that `field`'s name picks. Names are compared as written first (no
// unescaping, no copy: a KV cache's metadata has thousands of objects); a name written with
// escapes, or an unknown one, is unescaped and compared again.
template <typename Target, std::size_t N>
std::size_t field_index(ondemand::field& field, const Path& where,
                        const Fields<Target, N>& fields) {
  const auto raw = field.key();
  for (std::size_t index = 0; index < N; ++index) {
    // Safe: the names are short, without quotes or backslashes, and the text is padded.
    if (raw.unsafe_is_equal(fields[index].name)) return index;
  }
  const std::string_view name = take(field.unescaped_key());
  for (std::size_t index = 0; index < N; ++index) {
    if (fields[index].name == name) return index;
  }
  invalid(where.field(name), "unknown field");
}

// Reads each field of the object at `where` into `target` with its row of `fields`; rejects
// unknown and repeated fields, then missing required ones (in table order). A typo or a foreign
// document must not pass silently. `seen` marks the rows read already by other means.
template <typename Target, std::size_t N>
void read_object(ondemand::value& value, const Path& where, const Fields<Target, N>& fields,
                 Target& target, std::array<bool, N> seen = {}) {
  auto object = take(value.get_object(), where, "must be an object");
  for (auto entry : object) {
    auto field = take(std::move(entry));
    const std::size_t index = field_index(field, where, fields);
    const std::string_view name = fields[index].name;
    if (seen[index]) invalid(where.field(name), "appears twice");
    seen[index] = true;
    fields[index].read(target, field.value(), where.field(fields[index].name));
  }
  for (std::size_t i = 0; i < N; ++i)
    if (fields[i].required && !seen[i]) invalid(where.field(fields[i].name), "missing");
}

// Calls `on_element(value, path)` for each element of the array at `where`; returns how many.
template <typename OnElement>
std::size_t read_array(ondemand::value& value, const Path& where, const char* expected,
                       OnElement on_element) {
  auto array = take(value.get_array(), where, expected);
  std::size_t count = 0;
  for (auto element : array) {
    auto item = take(std::move(element));
    on_element(item, where.element(count));
    ++count;
  }
  return count;
}

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
         try {
           read.device = Device::parse(string_value(value, path));
         } catch (const Error& error) {
           if (error.code() == ErrorCode::InvalidMetadata) throw;
           invalid(path, error.what());
         }
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
         auto attribute = take(std::move(entry));
         std::string name(take(attribute.unescaped_key()));
         auto text = string_value(attribute.value(), path.field(name), true);
         offer.attributes.insert_or_assign(std::move(name), std::move(text));
       }
     }},
}};
static_assert(well_formed(kOfferFields));

TransportOffer parse_offer(ondemand::value& item, const Path& where) {
  TransportOffer offer;
  read_object(item, where, kOfferFields, offer);
  return offer;
}

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
                      [&](ondemand::value& offer, const Path& at) {
                        endpoint.transports.push_back(parse_offer(offer, at));
                      }) == 0)
         invalid(path, "must be a non-empty array");
     }},
}};
static_assert(well_formed(kEndpointFields));

Endpoint parse_endpoint(ondemand::value& item, const Path& where) {
  Endpoint endpoint;
  read_object(item, where, kEndpointFields, endpoint);
  return endpoint;
}

// The top-level fields as read, before they become an RdmaMetadata.
struct MetadataFields {
  std::uint64_t kind = 0;
  std::vector<RemoteDescriptor> descriptors;
  std::uint64_t total_size = 0;  // at most kMaxTotalSize: never wraps
  std::string key, token;
  Endpoint endpoint;
  std::int64_t expires_at = 0;
};

constexpr Fields<MetadataFields, 7> kMetadataFields{{
    {"version", true,
     [](MetadataFields&, ondemand::value& value, const Path& path) {
       if (unsigned_value(value, path) != RdmaMetadata::kVersion)
         invalid(path,
                 "unsupported (this build speaks " + std::to_string(RdmaMetadata::kVersion) + ")");
     }},
    {"operation_kind", true,
     [](MetadataFields& read, ondemand::value& value, const Path& path) {
       read.kind = unsigned_value(value, path);
       if (read.kind != 1 && read.kind != 2) invalid(path, "must be 1 (read) or 2 (write)");
     }},
    {"descriptors", true,
     [](MetadataFields& read, ondemand::value& value, const Path& path) {
       auto& descriptors = read.descriptors;
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
    {"notification_key", true,
     [](MetadataFields& read, ondemand::value& value, const Path& path) {
       read.key = id_value(value, path);
     }},
    {"endpoint", true,
     [](MetadataFields& read, ondemand::value& value, const Path& path) {
       read.endpoint = parse_endpoint(value, path);
     }},
    {"token", true,
     [](MetadataFields& read, ondemand::value& value, const Path& path) {
       read.token = id_value(value, path);
     }},
    {"expires_at", true,
     [](MetadataFields& read, ondemand::value& value, const Path& path) {
       constexpr const char* kExpected =
           "must be a non-negative integer (unix milliseconds, 0 = never)";
       read.expires_at = take(value.get_int64(), path, kExpected);
       if (read.expires_at < 0) invalid(path, kExpected);
     }},
}};
static_assert(well_formed(kMetadataFields));

constexpr std::size_t kDescriptorsRow = [] {
  std::size_t row = 0;
  while (kMetadataFields[row].name != "descriptors") ++row;
  return row;
}();

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

namespace {

// simdjson reads the text as it goes: on a broken document the first complaint may be about a
// field. Only when something was wrong, a full parse tells whether the text is JSON at all.
RdmaMetadata parse_metadata(std::string_view text);

}  // namespace

RdmaMetadata RdmaMetadata::from_json(std::string_view text) {
  try {
    return parse_metadata(text);
  } catch (const Error&) {
    ShapeCheck check;
    if (!json::sax_parse(text, &check)) {
      throw Error(ErrorCode::InvalidMetadata,
                  check.problem().empty() ? std::string("not JSON") : check.problem());
    }
    throw;
  }
}

namespace {

RdmaMetadata parse_metadata(std::string_view text) {
  // simdjson reads a few bytes past the text: parse from a padded copy. One parser and one
  // buffer per thread, reused: a fetch by name parses metadata every time. A large text gets
  // its own, freed at once: the parser's index is 4 bytes per byte of text, and a server
  // thread would otherwise keep that for ever. 256 KiB covers 2048 descriptors (105 KB of
  // JSON) written otherwise than to_json writes them: a thread that parsed such metadata
  // keeps about 1.3 MB, and parsing it again needs no fresh allocation and page faults.
  constexpr std::size_t kReusedCapacity = 256u << 10;
  thread_local ondemand::parser reused_parser;
  thread_local std::string reused_padded;

  // A descriptor list written as to_json writes it is read without simdjson, which then reads
  // the other fields: '{' and the text after the list (canonical_descriptors.hpp).
  MetadataFields read;
  std::array<bool, kMetadataFields.size()> seen{};
  std::string_view head, body = text;
  if (auto canonical = read_canonical_descriptors(text);
      canonical && (canonical->rest.starts_with(',') || canonical->rest.starts_with('}'))) {
    read.descriptors = std::move(canonical->descriptors);
    read.total_size = canonical->total_size;
    seen[kDescriptorsRow] = true;
    head = "{";
    body = canonical->rest.substr(canonical->rest.starts_with(',') ? 1 : 0);
  }
  const std::size_t size = head.size() + body.size();

  std::optional<ondemand::parser> own_parser;
  std::string own_padded;
  const bool large = size > kReusedCapacity;
  if (large) {
    check_depth(body);  // before the parser's index (4 bytes per byte) is allocated
    own_parser.emplace();
  }
  auto& parser = large ? *own_parser : reused_parser;
  auto& padded = large ? own_padded : reused_padded;
  padded.assign(head);
  padded.append(body);
  padded.resize(size + simdjson::SIMDJSON_PADDING);
  auto document =
      take(parser.iterate(simdjson::padded_string_view(padded.data(), size, padded.size())));
  const Path root;
  auto top = take(document.get_value());
  read_object(top, root, kMetadataFields, read, seen);
  const char* after = nullptr;  // the root object must be all there is
  if (document.current_location().get(after) == simdjson::SUCCESS)
    throw Error(ErrorCode::InvalidMetadata, "not JSON: text after the object");
  // Keys are per descriptor (verbs rkeys): more than one each is nonsense, and unbounded.
  for (std::size_t i = 0; i < read.endpoint.transports.size(); ++i) {
    if (read.endpoint.transports[i].keys.size() > read.descriptors.size())
      invalid(root.field("endpoint").field("transports").element(i).field("keys"),
              "more keys than descriptors");
  }
  return RdmaMetadata(static_cast<OperationKind>(read.kind), std::move(read.descriptors),
                      std::move(read.key), std::move(read.endpoint), std::move(read.token),
                      read.expires_at);
}

}  // namespace

namespace {

template <class Number>
void append_number(std::string& out, Number value) {
  char text[24];
  auto end = std::to_chars(text, text + sizeof text, value).ptr;
  out.append(text, end);
}

}  // namespace

// The keys in nlohmann's (sorted) order, as the document always had them. The descriptors, which
// a KV cache has thousands of, are written directly (through a json tree each took ~600 ns),
// a few kilobytes at a time, and exactly as read_canonical_descriptors reads them back quickly.
std::string RdmaMetadata::to_json() const {
  std::string out;
  out.reserve(256 + descriptors_.size() * 56);
  out += "{\"descriptors\":[";
  // Up to the pointer's digits; a device's name has no characters that JSON escapes.
  std::string head;
  Device device;
  // Descriptors are written into `batch`, which is appended when it may not hold another.
  char batch[4096];
  std::size_t used = 0;
  for (std::size_t i = 0; i < descriptors_.size(); ++i) {
    const auto& d = descriptors_[i];
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
  out += "],\"endpoint\":";
  out += detail::endpoint_json(endpoint_).dump();
  out += ",\"expires_at\":";
  append_number(out, expires_at_ms_);
  out += ",\"notification_key\":";
  out += json(notification_key_).dump();
  out += ",\"operation_kind\":";
  append_number(out, static_cast<int>(kind_));
  out += ",\"token\":";
  out += json(token_).dump();
  out += ",\"version\":";
  append_number(out, kVersion);
  out += '}';
  return out;
}

}  // namespace memwire
