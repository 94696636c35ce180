#pragma once
// The metadata fuzzers' parse: from_json's answer, nullopt for Error{InvalidMetadata}, and a
// finding (abort) for anything else it throws.

#include <cstdlib>
#include <optional>
#include <string_view>

#include "memwire/error.hpp"

template <class Metadata>
std::optional<Metadata> parse_metadata(std::string_view json) {
  try {
    return Metadata::from_json(json);
  } catch (const memwire::Error& error) {
    if (error.code() != memwire::ErrorCode::InvalidMetadata) std::abort();
    return std::nullopt;
  }
}
