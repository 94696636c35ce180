#include "entry.hpp"

#include <nlohmann/json.hpp>

#include "channel_rules.hpp"
#include "memwire/error.hpp"

namespace memwire::sideband::nats_detail {
namespace {

using nlohmann::json;

constexpr std::string_view kInlineHead = "{\"expires_at_ms\":";
constexpr std::string_view kInlineMiddle = ",\"metadata\":";

// In the words of every channel (channel_rules.hpp).
[[noreturn]] void invalid(std::string_view name, const std::string& why) {
  channel_rules::invalid_metadata(name, "its stored entry " + why);
}

std::int64_t expiry_field(const json& object, std::string_view name) {
  auto it = object.find("expires_at_ms");
  if (it == object.end()) invalid(name, "lacks 'expires_at_ms'");
  if (!it->is_number_unsigned()) invalid(name, "has a bad 'expires_at_ms'");
  auto value = it->get<std::uint64_t>();
  if (value > static_cast<std::uint64_t>(INT64_MAX)) invalid(name, "has a bad 'expires_at_ms'");
  return static_cast<std::int64_t>(value);
}

// The text we write ourselves: {"expires_at_ms":E,"metadata":<document>}. Taking the document
// out by position spares a parse and a re-serialisation on every fetch; anything else (spaces,
// other field order, extra fields) goes the slow, fully checked way. A document that does not
// end where it should fails in RdmaMetadata::from_json, which is strict.
bool decode_fast(std::string_view bytes, Entry& entry) {
  if (!bytes.starts_with(kInlineHead) || !bytes.ends_with('}')) return false;
  std::size_t pos = kInlineHead.size();
  std::uint64_t expires = 0;
  std::size_t digits = 0;
  while (pos < bytes.size() && bytes[pos] >= '0' && bytes[pos] <= '9' && digits < 18) {
    expires = expires * 10 + static_cast<std::uint64_t>(bytes[pos] - '0');
    ++pos;
    ++digits;
  }
  if (digits == 0 || (digits > 1 && bytes[kInlineHead.size()] == '0')) return false;
  if (bytes.substr(pos, kInlineMiddle.size()) != kInlineMiddle) return false;
  pos += kInlineMiddle.size();
  if (pos >= bytes.size() - 1 || bytes[pos] != '{') return false;
  entry.expires_at_ms = static_cast<std::int64_t>(expires);
  entry.metadata_json.assign(bytes.substr(pos, bytes.size() - 1 - pos));
  return true;
}

}  // namespace

std::string encode_inline(std::string_view metadata_json, std::int64_t expires_at_ms) {
  std::string out;
  out.reserve(metadata_json.size() + 48);
  out.append(kInlineHead);
  out.append(std::to_string(expires_at_ms));
  out.append(kInlineMiddle);
  out.append(metadata_json);
  out.push_back('}');
  return out;
}

std::string encode_parts(std::size_t parts, std::string_view part_key, std::size_t size,
                         std::int64_t expires_at_ms) {
  json entry = {{"expires_at_ms", expires_at_ms},
                {"parts", parts},
                {"part_key", std::string(part_key)},
                {"size", size}};
  return entry.dump();
}

Entry decode_entry(std::string_view bytes, std::string_view name) {
  Entry entry;
  if (decode_fast(bytes, entry)) return entry;

  json document = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) invalid(name, "is not JSON");
  if (!document.is_object()) invalid(name, "is not a JSON object");

  const bool has_metadata = document.contains("metadata");
  const bool has_parts = document.contains("parts");
  if (!has_metadata && !has_parts && !document.contains("expires_at_ms")) {
    // Bare metadata, put there by hand or by another tool: it never expires.
    entry.metadata_json.assign(bytes);
    return entry;
  }
  if (has_metadata == has_parts) invalid(name, "needs exactly one of 'metadata' and 'parts'");

  entry.expires_at_ms = expiry_field(document, name);
  if (has_metadata) {
    if (document.size() != 2) invalid(name, "has unknown fields");
    const json& metadata = document["metadata"];
    if (!metadata.is_object()) invalid(name, "has a 'metadata' that is not an object");
    entry.metadata_json = metadata.dump();
    return entry;
  }

  if (document.size() != 4) invalid(name, "has missing or unknown fields");
  const json& parts = document["parts"];
  const auto key = document.find("part_key");
  const auto size = document.find("size");
  if (!parts.is_number_unsigned() || parts.get<std::uint64_t>() == 0 ||
      parts.get<std::uint64_t>() > 65536) {
    invalid(name, "has a bad 'parts'");
  }
  if (key == document.end() || !key->is_string() || key->get<std::string>().empty()) {
    invalid(name, "has a bad 'part_key'");
  }
  // Subject tokens of a KV key: a name's characters (and '=' of "=pool."), no wildcard, no
  // empty token. Which key the pieces must lie under is the reader's check (Store::read_parts).
  const auto& text = key->get<std::string>();
  char last = '.';
  for (char c : text) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '-' || c == '_' || c == '=' || (c == '.' && last != '.');
    if (!ok) invalid(name, "has a bad 'part_key'");
    last = c;
  }
  if (last == '.') invalid(name, "has a bad 'part_key'");
  if (size == document.end() || !size->is_number_unsigned() || size->get<std::uint64_t>() == 0 ||
      size->get<std::uint64_t>() > kMaxMetadataBytes) {
    invalid(name, "has a bad 'size'");
  }
  entry.parts = static_cast<std::size_t>(parts.get<std::uint64_t>());
  entry.part_key = key->get<std::string>();
  entry.size = static_cast<std::size_t>(size->get<std::uint64_t>());
  return entry;
}

}  // namespace memwire::sideband::nats_detail
