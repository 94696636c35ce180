#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "memwire/export.hpp"

namespace memwire::sideband {

class HttpEndpoint;

struct MEMWIRE_API MetricsListenerOptions {
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;  // 0 = any free port; see MetricsListener::port()
  // Connections served at once; one more is answered 503 and closed. Scrapers need few.
  std::size_t max_connections = 16;
  // The Prometheus text to serve, e.g. [&c] { return memwire::to_prometheus(c.telemetry()); }
  std::function<std::string()> metrics;
};

// A small HTTP listener for workers that run no HttpEndpoint: GET /metrics (the request
// counters of this listener, then `metrics`) and GET /healthz ("ok"), nothing else (404).
// Bounded like the endpoint: connections, request read time, keep-alive idle time.
class MEMWIRE_API MetricsListener {
 public:
  // Binds and serves at once; throws Error{Transport} when it cannot bind.
  [[nodiscard("dropping it stops the listener at once")]] explicit MetricsListener(
      MetricsListenerOptions options);
  ~MetricsListener();  // stops and joins
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  std::uint16_t port() const noexcept;
  std::string url() const;  // "http://ADDRESS:PORT"

 private:
  std::unique_ptr<HttpEndpoint> endpoint_;
};

}  // namespace memwire::sideband
