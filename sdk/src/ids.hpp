#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

// For hash tables of our own random ids (notification keys): their first 8 bytes are already
// uniformly random, and a peer can look ids up but never insert one.
struct Id128Hash {
  std::size_t operator()(const Id128& id) const noexcept {
    std::uint64_t word;
    std::memcpy(&word, id.data(), sizeof word);
    return static_cast<std::size_t>(word);
  }
};

}  // namespace memwire
