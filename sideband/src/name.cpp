#include <string>

#include "memwire/error.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::sideband {
namespace {

constexpr std::size_t kMaxNameLength = 200;

bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// Names reach logs and error messages: show them escaped so a control byte cannot forge a line.
std::string printable(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64)) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      out += kHex[static_cast<unsigned char>(c) & 0xf];
    }
  }
  if (name.size() > 64) out += "...";
  return out;
}

}  // namespace

void validate_name(std::string_view name) {
  auto fail = [&](const char* why) {
    throw Error(ErrorCode::InvalidArgument, "invalid name '" + printable(name) + "': " + why);
  };
  if (name.empty()) fail("empty");
  if (name.size() > kMaxNameLength) fail("longer than 200 characters");
  bool token_start = true;
  for (char c : name) {
    if (c == '.') {
      if (token_start) fail("empty token (leading, trailing or doubled '.')");
      token_start = true;
    } else if (is_token_char(c)) {
      token_start = false;
    } else {
      fail("only letters, digits, '_', '-' and '.' between tokens are allowed");
    }
  }
  if (token_start) fail("empty token (leading, trailing or doubled '.')");
}

}  // namespace memwire::sideband
