#include "metadata/json_reader.hpp"

#include <charconv>

#include "util/ids.hpp"

namespace memwire::detail {

std::string Path::str() const {
  if (parent == nullptr) return std::string(name);
  auto head = parent->str();
  if (name.empty()) return head + "[" + std::to_string(index) + "]";
  return head.empty() ? std::string(name) : head + "." + std::string(name);
}

void invalid(const Path& where, std::string why) {
  throw MetadataError(where.document_name(), where.str(), std::move(why));
}

void not_json(const Path& where, simdjson::error_code code) {
  throw MetadataError(where.document_name(), "",
                      std::string("not JSON: ") + simdjson::error_message(code));
}

std::uint64_t unsigned_value(ondemand::value& value, const Path& where) {
  return take(value.get_uint64(), where, "must be a non-negative integer");
}

std::string string_value(ondemand::value& value, const Path& where, bool allow_empty) {
  std::string text(take(value.get_string(), where, "must be a string"));
  if (text.empty() && !allow_empty) invalid(where, "must not be empty");
  return text;
}

std::string id_value(ondemand::value& value, const Path& where) {
  auto text = string_value(value, where);
  if (!parse_id(text)) invalid(where, "must be 32 hex digits");
  return text;
}

namespace {

[[noreturn]] void unsupported_version(const Path& where, std::uint64_t version,
                                      std::uint64_t supported) {
  invalid(where, "unsupported version " + std::to_string(version) + " (this build reads version " +
                     std::to_string(supported) + ")");
}

}  // namespace

void version_value(ondemand::value& value, const Path& where, std::uint64_t supported) {
  const auto version = unsigned_value(value, where);
  if (version != supported) unsupported_version(where, version, supported);
}

Device device_value(ondemand::value& value, const Path& where) {
  try {
    return Device::parse(string_value(value, where));
  } catch (const MetadataError&) {
    throw;
  } catch (const Error& error) {
    invalid(where, std::string(error.message()));
  }
}

void check_depth(std::string_view text, const Path& root, std::size_t max_depth) {
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
      if (++depth > max_depth)
        throw MetadataError(root.document_name(), "",
                            "nested deeper than " + std::to_string(max_depth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

namespace {

struct Reused {
  ondemand::parser parser;
  std::string padded;
};

Reused& reused() {
  thread_local Reused buffers;
  return buffers;
}

}  // namespace

JsonText::JsonText(std::string_view head, std::string_view body, const Path& root,
                   std::size_t max_depth)
    : root_(root) {
  const std::size_t size = head.size() + body.size();
  const bool large = size > kReusedCapacity;
  if (large) {
    check_depth(body, root, max_depth);  // before the parser's index is allocated
    own_parser_.emplace();
  }
  auto& parser = large ? *own_parser_ : reused().parser;
  auto& padded = large ? own_padded_ : reused().padded;
  padded.assign(head);
  padded.append(body);
  padded.resize(size + simdjson::SIMDJSON_PADDING);
  document_ =
      take(parser.iterate(simdjson::padded_string_view(padded.data(), size, padded.size())), root);
}

ondemand::value JsonText::root_object() {
  ondemand::value top;
  const auto code = document_.get_value().get(top);
  if (code == simdjson::SCALAR_DOCUMENT_AS_VALUE) invalid(root_, "must be an object");
  if (code != simdjson::SUCCESS) not_json(root_, code);
  return top;
}

void JsonText::expect_end() {
  const char* after = nullptr;
  if (document_.current_location().get(after) == simdjson::SUCCESS)
    throw MetadataError(root_.document_name(), "", "not JSON: text after the object");
}

namespace {

using simdjson::error_code;

// Reads `value` and all it holds to the end (strings unescaped, numbers and literals parsed,
// structure followed); returns the first error. At the top (`version_field` not null), keeps
// the raw text of the field of that name.
error_code walk(ondemand::value value, std::string_view* version_field, std::string_view* token) {
  ondemand::json_type type;
  if (auto code = value.type().get(type)) return code;
  switch (type) {
    case ondemand::json_type::object: {
      ondemand::object object;
      if (auto code = value.get_object().get(object)) return code;
      for (auto entry : object) {
        ondemand::field field;
        if (auto code = std::move(entry).get(field)) return code;
        std::string_view key;
        if (auto code = field.unescaped_key().get(key)) return code;
        if (version_field && key == *version_field) *token = field.value().raw_json_token();
        if (auto code = walk(field.value(), nullptr, nullptr)) return code;
      }
      return simdjson::SUCCESS;
    }
    case ondemand::json_type::array: {
      ondemand::array array;
      if (auto code = value.get_array().get(array)) return code;
      for (auto element : array) {
        ondemand::value item;
        if (auto code = std::move(element).get(item)) return code;
        if (auto code = walk(item, nullptr, nullptr)) return code;
      }
      return simdjson::SUCCESS;
    }
    case ondemand::json_type::string: {
      std::string_view text;
      return value.get_string().get(text);
    }
    case ondemand::json_type::number: {
      double number;  // any JSON number, also past 64 bits
      return value.get_double().get(number);
    }
    case ondemand::json_type::boolean: {
      bool flag;
      return value.get_bool().get(flag);
    }
    case ondemand::json_type::null: {
      bool null = false;
      if (auto code = value.is_null().get(null)) return code;
      return null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

// The root value of `document` to its end; a scalar too.
error_code walk_document(ondemand::document& document, std::string_view version_field,
                         std::string_view& token) {
  ondemand::json_type type;
  if (auto code = document.type().get(type)) return code;
  if (type == ondemand::json_type::object || type == ondemand::json_type::array) {
    ondemand::value top;
    if (auto code = document.get_value().get(top)) return code;
    if (auto code = walk(top, &version_field, &token)) return code;
  } else if (type == ondemand::json_type::string) {
    std::string_view text;
    if (auto code = document.get_string().get(text)) return code;
  } else if (type == ondemand::json_type::number) {
    double number;
    if (auto code = document.get_double().get(number)) return code;
  } else if (type == ondemand::json_type::boolean) {
    bool flag;
    if (auto code = document.get_bool().get(flag)) return code;
  } else {
    bool null = false;
    if (auto code = document.is_null().get(null)) return code;
    if (!null) return simdjson::N_ATOM_ERROR;
  }
  const char* after = nullptr;
  if (document.current_location().get(after) == simdjson::SUCCESS)
    return simdjson::TRAILING_CONTENT;
  return simdjson::SUCCESS;
}

}  // namespace

void refuse_newer_or_broken(std::string_view text, const Path& root, std::size_t max_depth,
                            std::string_view version_field, std::uint64_t version) {
  check_depth(text, root, max_depth);  // also bounds walk's recursion
  std::optional<std::uint64_t> found;
  {
    JsonText whole({}, text, root, max_depth);
    std::string_view token;  // in whole's buffer
    if (const auto code = walk_document(whole.document(), version_field, token))
      not_json(root, code);
    while (!token.empty() && std::string_view(" \t\r\n").find(token.back()) != token.npos)
      token.remove_suffix(1);
    std::uint64_t number = 0;
    const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), number);
    if (!token.empty() && error == std::errc() && end == token.data() + token.size())
      found = number;
  }
  // A version this build does not read explains any other difference.
  if (found && *found != version) unsupported_version(root.field(version_field), *found, version);
}

}  // namespace memwire::detail
