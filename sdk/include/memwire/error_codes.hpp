#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memwire/error.hpp"

// The one codec between ErrorCode and what travels on a wire: a number (the stream frame and
// the verbs notice carry one byte) and a name (the NATS and HTTP channels carry JSON text).
// Both are stable: peers of different builds must agree on them.
namespace memwire {

inline constexpr std::array kAllErrorCodes{
    ErrorCode::InvalidArgument, ErrorCode::InvalidMetadata, ErrorCode::Pairing,
    ErrorCode::SizeMismatch,    ErrorCode::Timeout,         ErrorCode::Cancelled,
    ErrorCode::PeerLost,        ErrorCode::AccessDenied,    ErrorCode::Transport,
    ErrorCode::NotFound,        ErrorCode::Protocol,        ErrorCode::Expired,
};

// The stable name: an identifier ("not_found"). Empty for a value that is no ErrorCode.
constexpr std::string_view error_code_name(ErrorCode code) noexcept {
  switch (code) {  // no default: -Wswitch names an enumerator added without a name here
    case ErrorCode::InvalidArgument:
      return "invalid_argument";
    case ErrorCode::InvalidMetadata:
      return "invalid_metadata";
    case ErrorCode::Pairing:
      return "pairing";
    case ErrorCode::SizeMismatch:
      return "size_mismatch";
    case ErrorCode::Timeout:
      return "timeout";
    case ErrorCode::Cancelled:
      return "cancelled";
    case ErrorCode::PeerLost:
      return "peer_lost";
    case ErrorCode::AccessDenied:
      return "access_denied";
    case ErrorCode::Transport:
      return "transport";
    case ErrorCode::NotFound:
      return "not_found";
    case ErrorCode::Protocol:
      return "protocol";
    case ErrorCode::Expired:
      return "expired";
  }
  return {};
}

// An enumerator named above but missing from kAllErrorCodes fails here.
static_assert(error_code_name(static_cast<ErrorCode>(kAllErrorCodes.size())).empty(),
              "every ErrorCode belongs in kAllErrorCodes");

// The wire number: the enumerator's value + 1, so that 0 can mean "no error".
constexpr std::uint8_t wire_code(ErrorCode code) noexcept {
  return static_cast<std::uint8_t>(static_cast<std::uint8_t>(code) + 1);
}

constexpr bool is_error_wire_code(std::uint8_t number) noexcept {
  return number >= 1 && number <= kAllErrorCodes.size();
}

// A number that is no error code (0, or one from a newer peer) reads as Protocol: the peer
// said something this build cannot interpret.
constexpr ErrorCode error_code_from_wire(std::uint8_t number) noexcept {
  return is_error_wire_code(number) ? static_cast<ErrorCode>(number - 1) : ErrorCode::Protocol;
}

// Accepts the stable name and to_string()'s text ("not found", which HTTP owners send). An
// unknown name (a newer owner's code) reads as Transport: the owner failed, for a reason this
// build has no code for.
constexpr ErrorCode error_code_from_name(std::string_view name) noexcept {
  for (auto code : kAllErrorCodes) {
    const auto stable = error_code_name(code);
    if (name.size() != stable.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i)
      same = name[i] == stable[i] || (name[i] == ' ' && stable[i] == '_');
    if (same) return code;
  }
  return ErrorCode::Transport;
}

}  // namespace memwire
