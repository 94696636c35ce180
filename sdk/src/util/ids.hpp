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

// Two 64-bit compares, inlined: std::array's == calls memcmp for its 16 bytes.
struct Id128Equal {
  bool operator()(const Id128& a, const Id128& b) const noexcept {
    std::uint64_t a_words[2], b_words[2];
    std::memcpy(a_words, a.data(), sizeof a_words);
    std::memcpy(b_words, b.data(), sizeof b_words);
    return ((a_words[0] ^ b_words[0]) | (a_words[1] ^ b_words[1])) == 0;
  }
};

}  // namespace memwire
