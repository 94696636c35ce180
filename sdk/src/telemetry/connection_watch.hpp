#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "telemetry/event_log.hpp"
#include "telemetry/telemetry_recorder.hpp"

namespace memwire::detail {

// One open data-plane connection as telemetry sees it: counted open from construction until
// closed() (or destruction), with a log line for each end.
class ConnectionWatch {
 public:
  // `telemetry` null when it is off; `events` never null.
  ConnectionWatch(std::shared_ptr<TelemetryRecorder> telemetry,
                  std::shared_ptr<const EventLog> events, std::string transport,
                  Direction direction, std::string peer);
  ~ConnectionWatch();
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  // Once; later calls do nothing. At Warn and above it is logged as lost (it ended on an
  // error), below as closed (by this side, or by the peer at Info).
  void closed(std::string_view reason, LogLevel level);

 private:
  std::shared_ptr<TelemetryRecorder> telemetry_;
  std::shared_ptr<const EventLog> events_;
  const std::string transport_;
  const Direction direction_;
  const std::string peer_;
  std::atomic<bool> closed_{false};
};

}  // namespace memwire::detail
