#include "memwire/status.hpp"

namespace memwire {

std::string_view to_string(OperationKind kind) noexcept {
  switch (kind) {
    case OperationKind::Unspecified:
      return "unspecified";
    case OperationKind::Read:
      return "read";
    case OperationKind::Write:
      return "write";
  }
  return "unknown";
}

std::string_view to_string(OperationStatus status) noexcept {
  switch (status) {
    case OperationStatus::Uninitialized:
      return "uninitialized";
    case OperationStatus::Initialized:
      return "initialized";
    case OperationStatus::InProgress:
      return "in_progress";
    case OperationStatus::Complete:
      return "complete";
    case OperationStatus::Cancelled:
      return "cancelled";
    case OperationStatus::Errored:
      return "errored";
  }
  return "unknown";
}

}  // namespace memwire
