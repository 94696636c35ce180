#pragma once

#include <optional>
#include <string_view>

#include "memwire/export.hpp"

namespace memwire {

// How much the connector says (ConnectorOptions::log_level), each level including those above
// it: Error, a connector that cannot start; Warn, fallbacks, memory a transport cannot offer,
// refused and lost connections, failed operations; Info, transports not started (and the verbs
// transport's notes); Debug, every transport started and chosen, connection opened and closed,
// operation completed or cancelled.
enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

MEMWIRE_API std::string_view to_string(
    LogLevel level) noexcept;  // "debug", "info", "warn", "error"
MEMWIRE_API std::optional<LogLevel> parse_log_level(std::string_view text) noexcept;

}  // namespace memwire
