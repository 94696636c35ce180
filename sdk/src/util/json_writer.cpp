#include "util/json_writer.hpp"

#include <charconv>

#include "util/decimal.hpp"

namespace memwire {
namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

// The length of the well-formed UTF-8 sequence at the start of `text` (Unicode's table 3-7),
// or 0 when it is not one; `maximal` is then the length of its longest valid beginning, which
// one U+FFFD replaces (at least 1 byte).
std::size_t utf8_sequence(std::string_view text, std::size_t& maximal) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the second byte's range
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;  // nothing past U+10FFFF
  }
  maximal = 1;
  if (length == 0) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if (i >= text.size()) return 0;
    const unsigned char next = byte(i);
    if (next < (i == 1 ? low : 0x80) || next > (i == 1 ? high : 0xbf)) return 0;
    maximal = i + 1;
  }
  return length;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  std::size_t plain = 0;  // the start of the bytes not yet copied, which need no escape
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    std::size_t maximal = 1;
    if (c >= 0x80) {
      if (const auto length = utf8_sequence(text.substr(i), maximal); length != 0) {
        i += length;
        continue;
      }
    }
    out.append(text.data() + plain, i - plain);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += kReplacement;
        }
    }
    i += maximal;
    plain = i;
  }
  out.append(text.data() + plain, text.size() - plain);
  out += '"';
}

void JsonWriter::separate() {
  if (!first_ && !after_key_) out_ += ',';
  first_ = false;
  after_key_ = false;
}

JsonWriter& JsonWriter::open(char bracket) {
  separate();
  out_ += bracket;
  first_ = true;
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  out_ += bracket;
  first_ = false;
  after_key_ = false;
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  separate();
  append_json_string(out_, name);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  separate();
  append_json_string(out_, text);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t number) {
  separate();
  char digits[20];
  out_.append(digits, write_decimal(digits, number));
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  separate();
  char digits[24];
  out_.append(digits, std::to_chars(digits, digits + sizeof digits, number).ptr);
  return *this;
}

}  // namespace memwire
