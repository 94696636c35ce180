#pragma once
// What both metadata documents (one-shot and pool, docs/PROTOCOL.md) are read with: simdjson's
// on-demand parser, a table of fields per JSON object, and MetadataError naming a value's path.
// One-shot metadata is parsed on every fetch by name: nothing here builds a tree or a path
// string unless something is wrong.

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "memwire/metadata.hpp"

namespace memwire::detail {

namespace ondemand = simdjson::ondemand;

// The documents' names in messages (MetadataError's `document`).
inline constexpr std::string_view kOneShotDocument = "";
inline constexpr std::string_view kPoolDocument = "pool metadata";

// Where a value sits in the document. Spelled out only when something is wrong with it: building
// paths for a valid document cost as much as parsing it. The root names the document.
struct Path {
  const Path* parent = nullptr;
  std::string_view name;  // a field's name; empty for an array element (and the root)
  std::size_t index = 0;
  std::string_view document;  // the root's: "" (one-shot metadata) or "pool metadata"

  static Path root(std::string_view document) { return {nullptr, {}, 0, document}; }
  Path field(std::string_view child) const { return {this, child, 0, {}}; }
  Path element(std::size_t position) const { return {this, {}, position, {}}; }
  std::string str() const;
  std::string_view document_name() const { return parent ? parent->document_name() : document; }
};

[[noreturn]] void invalid(const Path& where, std::string why);
[[noreturn]] void not_json(const Path& where, simdjson::error_code code);

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
  not_json(where, code);
}

template <typename T>
T take(simdjson::simdjson_result<T> result, const Path& where) {
  T value;
  if (auto code = std::move(result).get(value); code != simdjson::SUCCESS) not_json(where, code);
  return value;
}

// The readers of values both documents hold.
std::uint64_t unsigned_value(ondemand::value& value, const Path& where);
std::string string_value(ondemand::value& value, const Path& where, bool allow_empty = false);
// A notification key or token: 32 hex digits.
std::string id_value(ondemand::value& value, const Path& where);
// A document's version: `supported`, or "unsupported version N".
void version_value(ondemand::value& value, const Path& where, std::uint64_t supported);
Device device_value(ondemand::value& value, const Path& where);

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

// The row of `fields` named `name`; N when there is none.
template <typename Target, std::size_t N>
constexpr std::size_t row_of(const Fields<Target, N>& fields, std::string_view name) {
  std::size_t row = 0;
  while (row < N && fields[row].name != name) ++row;
  return row;
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
  const std::string_view name = take(field.unescaped_key(), where);
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
    auto field = take(std::move(entry), where);
    const std::size_t index = field_index(field, where, fields);
    const auto path = where.field(fields[index].name);
    if (seen[index]) invalid(path, "appears twice");
    seen[index] = true;
    fields[index].read(target, field.value(), path);
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
    auto item = take(std::move(element), where);
    on_element(item, where.element(count));
    ++count;
  }
  return count;
}

// One text in simdjson's hands: a padded copy of `head` then `body` and a parser. Texts up to
// kReusedCapacity use one parser and buffer per thread, kept (a fetch by name parses metadata
// every time); a larger one gets its own, freed with this (the parser's index is 4 bytes per
// byte of text, which a server thread would otherwise keep for ever), after a check of its
// nesting that costs no memory. One JsonText per thread at a time.
class JsonText {
 public:
  // 256 KiB covers 2048 descriptors (105 KB of JSON) written otherwise than to_json writes them.
  static constexpr std::size_t kReusedCapacity = 256u << 10;

  JsonText(std::string_view head, std::string_view body, const Path& root, std::size_t max_depth);
  JsonText(const JsonText&) = delete;
  JsonText& operator=(const JsonText&) = delete;

  ondemand::document& document() { return document_; }
  // The root value, which must be an object.
  ondemand::value root_object();
  // Refuses text after the root value.
  void expect_end();

 private:
  const Path& root_;
  std::optional<ondemand::parser> own_parser_;
  std::string own_padded_;
  ondemand::document document_;
};

// Refuses `text` nested deeper than `max_depth`, in one pass and no memory.
void check_depth(std::string_view text, const Path& root, std::size_t max_depth);

// read_document's check: throws when `text` is not JSON or holds another version.
void refuse_newer_or_broken(std::string_view text, const Path& root, std::size_t max_depth,
                            std::string_view version_field, std::uint64_t version);

// What a document's reader calls around its reading: when `read` throws, the reason given is the
// first of these that holds (docs/PROTOCOL.md, version policy): the text is not JSON (or nests
// deeper than `max_depth`); its top-level `version_field` is a version other than `version`; the
// error `read` threw. simdjson reads the text as it goes: on a broken document its first
// complaint may be about a field, and a newer document's first difference may be a new field.
template <typename Read>
auto read_document(std::string_view text, const Path& root, std::size_t max_depth,
                   std::string_view version_field, std::uint64_t version, Read read) {
  try {
    return read();
  } catch (const Error&) {
    refuse_newer_or_broken(text, root, max_depth, version_field, version);
    throw;
  }
}

}  // namespace memwire::detail
