#include <string>

#include "memwire/metadata.hpp"

namespace memwire {
namespace {

// A path in a message: bytes outside printable ASCII (a field name from the document) become
// \xNN, so that a message is always printable and valid UTF-8 (an HTTP endpoint dumps it as
// JSON; a raw 0xff made that throw). field() keeps the bytes as they were.
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

std::string compose(std::string_view document, const std::string& field,
                    const std::string& reason) {
  std::string text(document);
  if (field.empty()) return text.empty() ? reason : text + ": " + reason;
  if (!text.empty()) text += ' ';
  return text + "field '" + printable(field) + "': " + reason;
}

}  // namespace

MetadataError::MetadataError(std::string_view document, std::string field, std::string reason)
    : Error(ErrorCode::InvalidMetadata, compose(document, field, reason)),
      detail_(std::make_shared<const Detail>(Detail{std::move(field), std::move(reason)})) {}

}  // namespace memwire
