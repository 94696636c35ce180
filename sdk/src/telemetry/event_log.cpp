#include "telemetry/event_log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "util/enum_names.hpp"
#include "util/json_writer.hpp"

namespace memwire {

std::string_view to_string(LogLevel level) noexcept {
  return detail::enum_name<LogLevel::Error>(level, {"debug", "info", "warn", "error"}, "info");
}

std::optional<LogLevel> parse_log_level(std::string_view text) noexcept {
  for (auto level : {LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error})
    if (to_string(level) == text) return level;
  if (text == "warning") return LogLevel::Warn;
  return std::nullopt;
}

namespace detail {
namespace {

// RFC 3339, UTC, microseconds: what services/common/json_log writes too.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const auto seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()) %
      std::chrono::seconds(1);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  const auto length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + length, sizeof text - length, ".%06lldZ",
                static_cast<long long>(micros.count()));
  return text;
}

}  // namespace

EventLog::EventLog(std::string connector, LogLevel level,
                   std::function<void(std::string_view)> sink)
    : connector_(std::move(connector)), level_(level), sink_(std::move(sink)) {}

void EventLog::write(LogLevel level, std::string_view event, std::string_view message,
                     const LogFields& fields) const {
  if (!enabled(level)) return;
  std::string text;
  JsonWriter line(text);
  line.begin_object().key("ts").value(timestamp()).key("level").value(to_string(level));
  line.key("event").value(event).key("msg").value(message).key("connector").value(connector_);
  auto add = [&](const char* name, std::string_view value) {
    if (!value.empty()) line.key(name).value(value);
  };
  add("peer", fields.peer_);
  add("transport", fields.transport_);
  add("key", fields.key_);
  add("code", fields.code_);
  add("kind", fields.kind_);
  add("side", fields.side_);
  add("reason", fields.reason_);
  if (fields.bytes_) line.key("bytes").value(*fields.bytes_);
  // Invalid UTF-8 (a peer's name, an OS message) is replaced, never thrown on (JsonWriter).
  line.end_object();
  try {
    sink_(text);
  } catch (...) {
    // A failing log sink must not fail the data plane.
  }
}

}  // namespace detail
}  // namespace memwire
