#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "memwire/error.hpp"

namespace memwire::detail {

// The value of MEMWIRE_* variable `variable` (`text`) as a non-negative number: Error
// {InvalidArgument} naming the variable otherwise. Shared by every folder that reads its own
// settings (ConnectorOptions::from_environment).
template <typename Number>
Number number_from_environment(const char* variable, const char* text) {
  std::istringstream in(text);
  long long value = -1;
  if (!(in >> value) || !in.eof() || value < 0)
    throw Error(ErrorCode::InvalidArgument,
                std::string(variable) + "='" + text + "' is not a number");
  return static_cast<Number>(value);
}

// A comma-separated list, empty items dropped.
inline std::vector<std::string> list_from_environment(const char* text) {
  std::vector<std::string> items;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

}  // namespace memwire::detail
