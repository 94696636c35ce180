#include "common/telemetry.hpp"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/json_log.hpp"
#include "memwire/telemetry.hpp"

namespace memwire::services {
namespace {

// A connector's JSON line, re-emitted by log_json (its own timestamp, one writer, one format).
void log_connector_line(std::string_view line) {
  auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object())
    return log_json("warn", "unparsable connector log line", {{"line", std::string(line)}});
  const auto level = parsed.value("level", std::string("info"));
  const auto message = parsed.value("msg", std::string());
  parsed.erase("ts");
  parsed.erase("level");
  parsed.erase("msg");
  log_json(level, message, std::move(parsed));
}

}  // namespace

ConnectorOptions connector_options_from_environment() {
  auto options = ConnectorOptions::from_environment();
  if (options.log) options.log = log_connector_line;
  return options;
}

std::unique_ptr<sideband::MetricsListener> start_metrics_listener(const Arguments& arguments,
                                                                  const Connector& connector) {
  std::string text, source = kMetricsListen;
  if (arguments.has(kMetricsListen)) {
    text = arguments.get(kMetricsListen);
  } else if (const char* value = std::getenv("MEMWIRE_METRICS_LISTEN"); value && *value) {
    text = value;
    source = "MEMWIRE_METRICS_LISTEN";
  } else {
    return nullptr;
  }
  const auto address = parse_listen_address(text, source);
  sideband::MetricsListenerOptions options;
  options.bind_address = address.host;
  options.port = address.port;
  options.metrics = [&connector] { return to_prometheus(connector.telemetry()); };
  auto listener = std::make_unique<sideband::MetricsListener>(std::move(options));
  log_json("info", "metrics listener started",
           {{"url", listener->url() + "/metrics"}, {"connector", connector.name()}});
  return listener;
}

std::chrono::milliseconds linger_of(const Arguments& arguments) {
  if (!arguments.has(kLinger) || arguments.get(kLinger) == "0") return std::chrono::milliseconds(0);
  return arguments.get_seconds(kLinger, std::chrono::milliseconds(0));
}

}  // namespace memwire::services
