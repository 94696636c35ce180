// Name validation: every name a client sends (HTTP path, NATS subject, CLI word) passes here
// first. A name is accepted or refused with Error{InvalidArgument} whose text stays printable
// (names reach logs: a control byte must not forge a line) and short.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "memwire/error.hpp"
#include "memwire/sideband/channel.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  try {
    memwire::sideband::validate_name(name);
    // Accepted: 1..200 characters of letters, digits, '_', '-' and inner single dots.
    if (name.empty() || name.size() > 200 || name.front() == '.' || name.back() == '.' ||
        name.find("..") != std::string_view::npos)
      std::abort();
    for (char c : name)
      if (std::strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", c) ==
              nullptr ||
          c == '\0')
        std::abort();
  } catch (const memwire::Error& error) {
    if (error.code() != memwire::ErrorCode::InvalidArgument) std::abort();
    const std::string_view text = error.what();
    if (text.size() > 400) std::abort();
    for (char c : text)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        std::abort();
  }
  return 0;
}
