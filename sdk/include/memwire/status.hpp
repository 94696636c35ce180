#pragma once

#include <string_view>

#include "memwire/export.hpp"

namespace memwire {

enum class OperationKind { Unspecified = 0, Read = 1, Write = 2 };

// Same values as nixl_connect's OperationStatus. Complete, Cancelled and Errored are sticky.
enum class OperationStatus {
  Uninitialized = 0,
  Initialized = 1,
  InProgress = 2,
  Complete = 3,
  Cancelled = 4,
  Errored = 5,
};

MEMWIRE_API std::string_view to_string(OperationKind kind) noexcept;
MEMWIRE_API std::string_view to_string(OperationStatus status) noexcept;

constexpr bool is_terminal(OperationStatus status) noexcept {
  return status == OperationStatus::Complete || status == OperationStatus::Cancelled ||
         status == OperationStatus::Errored;
}

}  // namespace memwire
