#pragma once

#include <cstdint>
#include <cstring>

namespace memwire {

// Decimal digits of unsigned numbers, for writing thousands of them (a KV cache's metadata):
// eight digits at a time, whose halves and quarters do not wait for each other, where
// std::to_chars divides the whole number by 100 once per two digits, one after the other.
namespace decimal_detail {

inline constexpr char kPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

// Exactly two digits of `value` < 100.
inline char* two(char* out, std::uint32_t value) {
  std::memcpy(out, kPairs + 2 * value, 2);
  return out + 2;
}

// Exactly eight digits of `value` < 10^8, leading zeros included.
inline char* eight(char* out, std::uint32_t value) {
  const std::uint32_t high = value / 10000, low = value % 10000;
  two(out, high / 100);
  two(out + 2, high % 100);
  two(out + 4, low / 100);
  two(out + 6, low % 100);
  return out + 8;
}

// `value` < 10^8 without leading zeros.
inline char* up_to_eight(char* out, std::uint32_t value) {
  char digits[8];
  eight(digits, value);
  int skip = 0;
  while (skip < 7 && digits[skip] == '0') ++skip;
  std::memcpy(out, digits + skip, 8 - skip);
  return out + 8 - skip;
}

}  // namespace decimal_detail

// Writes `value` in decimal (at most 20 characters) at `out`; returns the end.
inline char* write_decimal(char* out, std::uint64_t value) {
  using namespace decimal_detail;
  constexpr std::uint64_t kEight = 100000000;
  if (value < kEight) return up_to_eight(out, static_cast<std::uint32_t>(value));
  const auto low = static_cast<std::uint32_t>(value % kEight);
  value /= kEight;
  if (value < kEight) {
    out = up_to_eight(out, static_cast<std::uint32_t>(value));
  } else {
    out = up_to_eight(out, static_cast<std::uint32_t>(value / kEight));  // at most 4 digits
    out = eight(out, static_cast<std::uint32_t>(value % kEight));
  }
  return eight(out, low);
}

}  // namespace memwire
