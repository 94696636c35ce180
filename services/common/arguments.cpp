#include "common/arguments.hpp"

#include <charconv>
#include <cmath>

namespace memwire::services {

Arguments::Arguments(int argc, char** argv, int first, const std::set<std::string>& valued,
                     const std::set<std::string>& switches) {
  for (int i = first; i < argc; ++i) {
    std::string word = argv[i];
    if (!word.starts_with("--") || word == "--") {
      positional_.push_back(word);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (auto eq = word.find('='); eq != std::string::npos) {
      value = word.substr(eq + 1);
      word = word.substr(0, eq);
      inline_value = true;
    }
    if (switches.contains(word)) {
      if (inline_value) throw UsageError(word + " takes no value");
      values_[word] = "1";
    } else if (valued.contains(word)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError(word + " needs a value");
        value = argv[++i];
      }
      values_[word] = value;
    } else {
      throw UsageError("unknown option " + word);
    }
  }
}

std::string Arguments::get(const std::string& option, const std::string& fallback) const {
  auto it = values_.find(option);
  return it == values_.end() ? fallback : it->second;
}

std::uint64_t Arguments::get_uint(const std::string& option, std::uint64_t fallback,
                                  std::uint64_t min, std::uint64_t max) const {
  auto it = values_.find(option);
  if (it == values_.end()) return fallback;
  std::uint64_t value = 0;
  const auto& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < min ||
      value > max) {
    throw UsageError(option + " needs a whole number from " + std::to_string(min) + " to " +
                     std::to_string(max) + ", got '" + text + "'");
  }
  return value;
}

std::chrono::milliseconds Arguments::get_seconds(const std::string& option,
                                                 std::chrono::milliseconds fallback,
                                                 std::chrono::milliseconds max) const {
  auto it = values_.find(option);
  if (it == values_.end()) return fallback;
  const auto& text = it->second;
  double seconds = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  const double max_seconds = static_cast<double>(max.count()) / 1000;
  // Checked as a double before any conversion: nan, inf and 1e300 never reach a clock.
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
      !std::isfinite(seconds) || seconds < 0.001 || seconds > max_seconds) {
    throw UsageError(option + " needs seconds from 0.001 to " +
                     std::to_string(static_cast<long long>(max_seconds)) + ", got '" + text + "'");
  }
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

std::chrono::milliseconds Arguments::get_milliseconds(const std::string& option,
                                                      std::chrono::milliseconds fallback,
                                                      std::chrono::milliseconds min,
                                                      std::chrono::milliseconds max) const {
  auto value =
      get_uint(option, static_cast<std::uint64_t>(fallback.count()),
               static_cast<std::uint64_t>(min.count()), static_cast<std::uint64_t>(max.count()));
  return std::chrono::milliseconds(static_cast<std::int64_t>(value));
}

ListenAddress parse_listen_address(const std::string& text, const std::string& source) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size())
    throw UsageError(source + " '" + text + "' is not ADDR:PORT");
  ListenAddress address;
  address.host = text.substr(0, colon);
  if (address.host.size() >= 2 && address.host.front() == '[' && address.host.back() == ']')
    address.host = address.host.substr(1, address.host.size() - 2);
  if (address.host.empty()) address.host = "0.0.0.0";
  const auto port_text = text.substr(colon + 1);
  unsigned long port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9' || port > 65535)
      throw UsageError(source + ": bad port in '" + text + "'");
    port = port * 10 + static_cast<unsigned long>(c - '0');
  }
  if (port > 65535) throw UsageError(source + ": bad port in '" + text + "'");
  address.port = static_cast<std::uint16_t>(port);
  return address;
}

}  // namespace memwire::services
