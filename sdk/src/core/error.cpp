#include "memwire/error.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "memwire/error_codes.hpp"

namespace memwire {

// The human text is the stable name with spaces ("not found"), so the two cannot drift apart.
std::string_view to_string(ErrorCode code) noexcept {
  static const auto texts = [] {
    std::array<std::string, kAllErrorCodes.size()> spelled;
    for (auto each : kAllErrorCodes) {
      auto& text = spelled[static_cast<std::size_t>(each)];
      text = error_code_name(each);
      std::replace(text.begin(), text.end(), '_', ' ');
    }
    return spelled;
  }();
  const auto index = static_cast<std::size_t>(code);
  return index < texts.size() ? std::string_view(texts[index]) : std::string_view("unknown");
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(""),  // what() is text_; "" keeps the base's own string unallocated
      code_(code),
      text_(std::make_shared<const std::string>(std::string(to_string(code)) + ": " + message)),
      message_at_(to_string(code).size() + 2) {}

}  // namespace memwire
