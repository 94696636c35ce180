#pragma once
// The options of an HttpChannel to the endpoint at `url` for the sideband tests.

#include <string>
#include <utility>

#include "memwire/sideband/http.hpp"

namespace memwire::test_support {

// Sends `token` as the bearer token (none when empty).
inline sideband::HttpChannelOptions http_channel_options(const std::string& url,
                                                         std::string token = {}) {
  sideband::HttpChannelOptions options;
  options.url = url;
  options.token = std::move(token);
  return options;
}

}  // namespace memwire::test_support
