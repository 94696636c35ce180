// The HTTP endpoint (memwire-registry, or an endpoint embedded in a worker): request line,
// headers and body as any client on the network sends them, raw, to a started endpoint in this
// process (cpp-httplib's parsing, authentication, routing, the metadata and server handlers).
// Input: the bytes of one connection; the endpoint's token is "fuzz-token". It must answer or
// close, and close once the client has half-closed; long polls are capped at 100 ms.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "loopback.hpp"
#include "memwire/sideband/http.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static memwire::sideband::HttpEndpoint endpoint([] {
    memwire::sideband::HttpEndpointOptions options;
    options.token = "fuzz-token";
    options.max_wait = std::chrono::milliseconds(100);
    options.threads = 4;
    return options;
  }());
  static const bool started = (endpoint.start(), true);
  (void)started;

  const int fd = memwire::fuzz::connect_loopback(endpoint.port());
  memwire::fuzz::send_then_half_close(fd, {reinterpret_cast<const char*>(data), size});
  if (!memwire::fuzz::drain_until_closed(fd)) {
    std::fprintf(stderr, "the endpoint kept the connection open after the client's end\n");
    std::abort();
  }
  ::close(fd);
  return 0;
}
