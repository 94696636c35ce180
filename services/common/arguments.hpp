#pragma once

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

// "--name value" options and positional words, checked against what a program accepts.
class Arguments {
 public:
  // `valued` take a value, `switches` take none; anything else starting with "--" is an error.
  Arguments(int argc, char** argv, int first, const std::set<std::string>& valued,
            const std::set<std::string>& switches = {});

  const std::vector<std::string>& positional() const noexcept { return positional_; }
  bool has(const std::string& option) const { return values_.contains(option); }
  std::string get(const std::string& option, const std::string& fallback = {}) const;
  std::uint64_t get_uint(const std::string& option, std::uint64_t fallback) const;
  double get_double(const std::string& option, double fallback) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
};

}  // namespace memwire::services
