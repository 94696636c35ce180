#include "memwire/status.hpp"

#include "util/enum_names.hpp"

namespace memwire {

std::string_view to_string(OperationKind kind) noexcept {
  return detail::enum_name<OperationKind::Write>(kind, {"unspecified", "read", "write"}, "unknown");
}

std::string_view to_string(OperationStatus status) noexcept {
  return detail::enum_name<OperationStatus::Errored>(
      status, {"uninitialized", "initialized", "in_progress", "complete", "cancelled", "errored"},
      "unknown");
}

}  // namespace memwire
