#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "memwire/export.hpp"

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

MEMWIRE_API std::string_view to_string(ErrorCode code) noexcept;

// The one exception type memwire throws at its API boundary. what() is "<code>: <message>",
// composed once; code() and message() give the two parts apart (for a channel that sends them
// on, or a caller that words its own).
class MEMWIRE_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  // Copied, never moved: a move would leave the source without text, and what() must always
  // give one. A copy shares the text (one atomic count).
  Error(const Error&) noexcept = default;
  Error& operator=(const Error&) noexcept = default;
  ErrorCode code() const noexcept { return code_; }
  const char* what() const noexcept override { return text_->c_str(); }
  // The message without the code's text in front.
  std::string_view message() const noexcept { return std::string_view(*text_).substr(message_at_); }

 private:
  ErrorCode code_;
  // The text is held here, not in std::runtime_error: libstdc++ counts that string's copies
  // inside its shared library, where a race detector cannot see the count, and an Error is
  // copied across threads (a transport thread reads its copy while the waiter frees another).
  // Copies share this one; copying stays noexcept, as an exception's must.
  std::shared_ptr<const std::string> text_;
  std::size_t message_at_;  // where the message starts in the text
};

}  // namespace memwire
