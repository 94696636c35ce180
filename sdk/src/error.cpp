#include "memwire/error.hpp"

namespace memwire {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "invalid argument";
    case ErrorCode::InvalidMetadata:
      return "invalid metadata";
    case ErrorCode::Pairing:
      return "pairing";
    case ErrorCode::SizeMismatch:
      return "size mismatch";
    case ErrorCode::Timeout:
      return "timeout";
    case ErrorCode::Cancelled:
      return "cancelled";
    case ErrorCode::PeerLost:
      return "peer lost";
    case ErrorCode::AccessDenied:
      return "access denied";
    case ErrorCode::Transport:
      return "transport";
    case ErrorCode::NotFound:
      return "not found";
    case ErrorCode::Protocol:
      return "protocol";
    case ErrorCode::Expired:
      return "expired";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code) {}

}  // namespace memwire
