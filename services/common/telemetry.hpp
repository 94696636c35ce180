#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "common/arguments.hpp"
#include "memwire/connector.hpp"
#include "memwire/sideband/metrics_listener.hpp"

namespace memwire::services {

// "--metrics-listen ADDR:PORT": where a program serves its connector's telemetry
// (GET /metrics, GET /healthz); $MEMWIRE_METRICS_LISTEN is its default. Absent: no listener.
inline const std::string kMetricsListen = "--metrics-listen";
// "--linger S": seconds a worker stays up after finishing, so that a scraper reads its final
// counts (default 0).
inline const std::string kLinger = "--linger";

// ConnectorOptions::from_environment(), with the connector's log lines (on when MEMWIRE_LOG=1
// or MEMWIRE_LOG_LEVEL is set) written through log_json like every other line of a service.
ConnectorOptions connector_options_from_environment();

// Serves `connector`'s telemetry where --metrics-listen (or $MEMWIRE_METRICS_LISTEN) says, and
// logs the URL; null when neither is set. UsageError on a malformed ADDR:PORT.
std::unique_ptr<sideband::MetricsListener> start_metrics_listener(const Arguments& arguments,
                                                                  const Connector& connector);

// --linger S: zero when absent or "0"; otherwise as Arguments::get_seconds.
std::chrono::milliseconds linger_of(const Arguments& arguments);

}  // namespace memwire::services
