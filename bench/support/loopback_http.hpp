#pragma once
// An HttpEndpoint on loopback, started, and a channel to it: what the by-name benchmarks fetch
// through.

#include <memory>

#include "memwire/sideband/http.hpp"

namespace memwire::bench {

struct LoopbackHttp {
  sideband::HttpEndpoint endpoint;
  std::unique_ptr<sideband::HttpChannel> channel;

  LoopbackHttp() {
    endpoint.start();
    sideband::HttpChannelOptions options;
    options.url = endpoint.url();
    channel = std::make_unique<sideband::HttpChannel>(options);
  }
};

}  // namespace memwire::bench
