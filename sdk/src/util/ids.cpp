#include "util/ids.hpp"

#include <sys/random.h>

#include <cerrno>
#include <system_error>

namespace memwire {

Id128 random_id() {
  Id128 id;
  std::size_t filled = 0;
  while (filled < id.size()) {
    ssize_t n = getrandom(id.data() + filled, id.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(n);
  }
  return id;
}

std::string to_hex(const Id128& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(32, '0');
  for (std::size_t i = 0; i < id.size(); ++i) {
    text[2 * i] = kDigits[id[i] >> 4];
    text[2 * i + 1] = kDigits[id[i] & 0xf];
  }
  return text;
}

std::optional<Id128> parse_id(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    // Lower case only, as issued: one text per id, so a token with any character changed
    // (its case included) is another token, refused.
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  Id128 id;
  for (std::size_t i = 0; i < id.size(); ++i) {
    int high = nibble(hex[2 * i]), low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    id[i] = static_cast<std::uint8_t>(high << 4 | low);
  }
  return id;
}

bool equal_in_constant_time(const Id128& a, const Id128& b) noexcept {
  std::uint8_t difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

}  // namespace memwire
