#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memwire {

// Writes compact JSON text: the metadata documents and the event log. The library reads JSON
// with simdjson, which writes none; this is the other half. Strings are escaped as JSON needs
// ('"', '\\', control characters) and written as UTF-8; a byte that is not part of valid UTF-8
// becomes U+FFFD, so that the text is always JSON (a host or an OS message may hold any bytes).
// Commas are the writer's: a caller says what comes, in order.
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  // The next field's name, inside an object; its value follows.
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }

 private:
  JsonWriter& open(char bracket);
  JsonWriter& close(char bracket);
  void separate();

  std::string& out_;
  bool first_ = true;       // nothing written yet at this level: no comma before the next
  bool after_key_ = false;  // a key was written: its value takes no comma
};

// `text` as a JSON string, quotes included (JsonWriter's escaping).
void append_json_string(std::string& out, std::string_view text);

}  // namespace memwire
