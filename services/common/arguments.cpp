#include "common/arguments.hpp"

#include <charconv>

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

std::uint64_t Arguments::get_uint(const std::string& option, std::uint64_t fallback) const {
  auto it = values_.find(option);
  if (it == values_.end()) return fallback;
  std::uint64_t value = 0;
  const auto& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw UsageError(option + " needs a non-negative integer, got '" + text + "'");
  }
  return value;
}

double Arguments::get_double(const std::string& option, double fallback) const {
  auto it = values_.find(option);
  if (it == values_.end()) return fallback;
  try {
    std::size_t used = 0;
    double value = std::stod(it->second, &used);
    if (used != it->second.size() || value < 0) throw std::invalid_argument("");
    return value;
  } catch (const std::exception&) {
    throw UsageError(option + " needs a non-negative number, got '" + it->second + "'");
  }
}

}  // namespace memwire::services
