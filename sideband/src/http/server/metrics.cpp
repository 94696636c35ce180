#include "http/server/metrics.hpp"

#include <charconv>
#include <sstream>

namespace memwire::sideband::http {
namespace {

// The shortest text that reads back as exactly `value` (ostream's default kept 6 significant
// digits: 1234567.891011 became 1.23457e+06).
std::string exact(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc{} ? std::string(buffer, end) : std::string("NaN");
}

}  // namespace

std::string Metrics::route_of(const std::string& method, const std::string& path) {
  if (path == "/healthz") return "healthz";
  if (path == "/metrics") return "metrics";
  if (path == "/v1/metadata") return "list";
  if (path.starts_with("/v1/metadata/")) return "metadata";
  if (path == "/v1/servers") return "server_register";
  if (path.starts_with("/v1/servers/")) {
    return path.ends_with("/requests") ? "server_poll" : "server_remove";
  }
  if (path.starts_with("/v1/requests/")) {
    return (method == "POST" && path.ends_with("/reply")) ? "reply" : "request";
  }
  return "other";
}

void Metrics::record(const std::string& method, const std::string& path, int status,
                     std::chrono::microseconds duration) {
  auto route = route_of(method, path);
  std::lock_guard lock(mutex_);
  counts_[{route, method, status}]++;
  auto& latency = latency_[route];
  latency.seconds += static_cast<double>(duration.count()) / 1e6;
  latency.count++;
}

std::string Metrics::render(const std::map<std::string, double>& gauges) {
  std::ostringstream out;
  std::lock_guard lock(mutex_);
  out << "# HELP memwire_http_requests_total HTTP requests served.\n"
      << "# TYPE memwire_http_requests_total counter\n";
  for (const auto& [key, count] : counts_) {
    const auto& [route, method, status] = key;
    out << "memwire_http_requests_total{route=\"" << route << "\",method=\"" << method
        << "\",code=\"" << status << "\"} " << count << "\n";
  }
  out << "# HELP memwire_http_request_duration_seconds Time spent serving requests.\n"
      << "# TYPE memwire_http_request_duration_seconds summary\n";
  for (const auto& [route, latency] : latency_) {
    out << "memwire_http_request_duration_seconds_sum{route=\"" << route << "\"} "
        << exact(latency.seconds) << "\n"
        << "memwire_http_request_duration_seconds_count{route=\"" << route << "\"} "
        << latency.count << "\n";
  }
  for (const auto& [name, value] : gauges) {
    out << "# TYPE " << name << " gauge\n" << name << " " << exact(value) << "\n";
  }
  return out.str();
}

}  // namespace memwire::sideband::http
