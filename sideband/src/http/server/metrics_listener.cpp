#include "memwire/sideband/metrics_listener.hpp"

#include <algorithm>

#include "memwire/sideband/http.hpp"

namespace memwire::sideband {

MetricsListener::MetricsListener(MetricsListenerOptions options) {
  HttpEndpointOptions endpoint;
  endpoint.bind_address = std::move(options.bind_address);
  endpoint.port = options.port;
  endpoint.max_connections = std::max<std::size_t>(options.max_connections, 2);
  endpoint.threads = 1;         // more start on demand, up to max_connections
  endpoint.max_long_polls = 1;  // no route waits; the limit must stay below max_connections
  endpoint.ttl_sweep_interval = std::chrono::seconds(60);  // nothing to sweep
  endpoint.max_body_size = 4096;
  endpoint.metrics = std::move(options.metrics);
  endpoint.metrics_only = true;
  endpoint_ = std::make_unique<HttpEndpoint>(std::move(endpoint));
  endpoint_->start();
}

MetricsListener::~MetricsListener() = default;

std::uint16_t MetricsListener::port() const noexcept { return endpoint_->port(); }
std::string MetricsListener::url() const { return endpoint_->url(); }

}  // namespace memwire::sideband
