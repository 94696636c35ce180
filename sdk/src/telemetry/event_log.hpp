#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "memwire/log_level.hpp"

namespace memwire::detail {

// What a log line says beyond its message; empty fields are left out of the line.
// Set fluently: LogFields().transport("tcp").code("peer_lost").
class LogFields {
 public:
  LogFields& peer(std::string_view value) { return set(peer_, value); }
  LogFields& transport(std::string_view value) { return set(transport_, value); }
  LogFields& key(std::string_view value) { return set(key_, value); }    // notification key
  LogFields& code(std::string_view value) { return set(code_, value); }  // ErrorCode, snake case
  LogFields& kind(std::string_view value) { return set(kind_, value); }
  LogFields& side(std::string_view value) { return set(side_, value); }
  LogFields& reason(std::string_view value) { return set(reason_, value); }
  LogFields& bytes(std::uint64_t value) {
    bytes_ = value;
    return *this;
  }

 private:
  friend class EventLog;
  LogFields& set(std::string_view& field, std::string_view value) {
    field = value;
    return *this;
  }
  std::string_view peer_, transport_, key_, code_, kind_, side_, reason_;
  std::optional<std::uint64_t> bytes_;
};

// The connector's structured log: one JSON object per event at or above its level, handed to
// ConnectorOptions::log. Thread-safe (the sink is called concurrently if memwire's threads log
// at once; the stderr sink of from_environment writes each line with one call).
class EventLog {
 public:
  EventLog(std::string connector, LogLevel level, std::function<void(std::string_view)> sink);

  bool enabled(LogLevel level) const noexcept { return sink_ && level >= level_; }
  void write(LogLevel level, std::string_view event, std::string_view message,
             const LogFields& fields = LogFields()) const;
  const std::string& connector() const noexcept { return connector_; }

 private:
  const std::string connector_;
  const LogLevel level_;
  const std::function<void(std::string_view)> sink_;
};

}  // namespace memwire::detail
