#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memwire {

// 128-bit random identifiers: notification keys, access tokens, connector names.
using Id128 = std::array<std::uint8_t, 16>;

Id128 random_id();                                    // from the kernel's CSPRNG
std::string to_hex(const Id128& id);                  // 32 lowercase hex digits
std::optional<Id128> parse_id(std::string_view hex);  // exactly 32 lower-case hex digits
bool equal_in_constant_time(const Id128& a, const Id128& b) noexcept;  // for tokens

}  // namespace memwire
