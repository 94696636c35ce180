#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace memwire {

enum class ErrorCode {
  InvalidArgument,
  InvalidMetadata,
  Pairing,
  SizeMismatch,
  Timeout,
  Cancelled,
  PeerLost,
  AccessDenied,
  Transport,
  NotFound,
  Protocol,
  Expired,
};

std::string_view to_string(ErrorCode code) noexcept;

// The one exception type memwire throws at its API boundary.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace memwire
