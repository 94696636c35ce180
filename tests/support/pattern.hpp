#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace memwire::test_support {

// A byte pattern that differs per seed and per position, so a misplaced or missing byte shows.
inline std::byte pattern_byte(std::uint64_t seed, std::size_t position) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + position;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::byte>(x);
}

inline void fill_pattern(std::span<std::byte> bytes, std::uint64_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern_byte(seed, i);
}

// Index of the first wrong byte, or bytes.size() when all match.
inline std::size_t first_mismatch(std::span<const std::byte> bytes, std::uint64_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] != pattern_byte(seed, i)) return i;
  return bytes.size();
}

}  // namespace memwire::test_support
