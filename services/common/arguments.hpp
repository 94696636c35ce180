#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace memwire::services {

// Bad command lines: the programs exit with status 2 on it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The longest duration any program accepts (timeouts, TTLs): 365 days. Longer values are
// refused as usage errors rather than overflowing clocks downstream.
inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365);

// "--name value" options and positional words, checked against what a program accepts.
class Arguments {
 public:
  // `valued` take a value, `switches` take none; anything else starting with "--" is an error.
  Arguments(int argc, char** argv, int first, const std::set<std::string>& valued,
            const std::set<std::string>& switches = {});

  const std::vector<std::string>& positional() const noexcept { return positional_; }
  bool has(const std::string& option) const { return values_.contains(option); }
  std::string get(const std::string& option, const std::string& fallback = {}) const;
  // A decimal integer (digits only) in [min, max]; UsageError otherwise.
  std::uint64_t get_uint(const std::string& option, std::uint64_t fallback, std::uint64_t min = 0,
                         std::uint64_t max = UINT64_MAX) const;
  // A duration in seconds ("30", "0.5", "1e3"): finite, at least 1 ms, at most `max`;
  // UsageError otherwise (nan, inf, 0, negative, too long, trailing text).
  std::chrono::milliseconds get_seconds(const std::string& option,
                                        std::chrono::milliseconds fallback,
                                        std::chrono::milliseconds max = kMaxDuration) const;
  // A duration in whole milliseconds in [min, max].
  std::chrono::milliseconds get_milliseconds(const std::string& option,
                                             std::chrono::milliseconds fallback,
                                             std::chrono::milliseconds min,
                                             std::chrono::milliseconds max = kMaxDuration) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
};

// A listening address from a flag or variable named `source`: "ADDR:PORT", "[V6]:PORT" or
// ":PORT" (all addresses); port 0 picks a free one. UsageError when malformed.
struct ListenAddress {
  std::string host;
  std::uint16_t port = 0;
};
ListenAddress parse_listen_address(const std::string& text, const std::string& source);

}  // namespace memwire::services
