#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace memwire::test_support {

// A byte pattern that differs per seed and per position, so a misplaced or missing byte shows.
// Made a word at a time: tests fill and check hundreds of MiB, under sanitizers too.
inline std::uint64_t pattern_word(std::uint64_t seed, std::size_t word) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + word;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return x;
}

inline std::byte pattern_byte(std::uint64_t seed, std::size_t position) {
  return static_cast<std::byte>(pattern_word(seed, position / 8) >> (8 * (position % 8)));
}

inline void fill_pattern(std::span<std::byte> bytes, std::uint64_t seed) {
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    auto word = pattern_word(seed, i / 8);
    std::memcpy(bytes.data() + i, &word, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = pattern_byte(seed, i);
}

// Index of the first wrong byte, or bytes.size() when all match.
inline std::size_t first_mismatch(std::span<const std::byte> bytes, std::uint64_t seed) {
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    auto word = pattern_word(seed, i / 8);
    if (std::memcmp(bytes.data() + i, &word, 8) != 0) break;
  }
  for (; i < bytes.size(); ++i)
    if (bytes[i] != pattern_byte(seed, i)) return i;
  return bytes.size();
}

}  // namespace memwire::test_support
