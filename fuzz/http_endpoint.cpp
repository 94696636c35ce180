// The HTTP endpoint (memwire-registry, or an endpoint embedded in a worker): request line,
// headers and body as any client on the network sends them, raw, to a started endpoint in this
// process (authentication, routing, the metadata and server handlers; cpp-httplib's own parsing
// is Debian's uninstrumented library). The endpoint's token is "fuzz-token"; long polls are
// capped at 100 ms. Input: requests separated by "\n\0\0\n", each sent on its own connection
// (cpp-httplib 0.11 drops pipelined requests; half-closing gets no answer at all), which ends
// with the first complete response, the endpoint closing, or 50 ms of silence.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loopback.hpp"
#include "memwire/sideband/http.hpp"

namespace {

constexpr std::string_view kSeparator("\n\0\0\n", 4);
constexpr int kQuietMs = 50;

// True once `answer` holds a whole response: headers, and the body its Content-Length gives.
bool complete_response(const std::string& answer) {
  auto end = answer.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  constexpr std::string_view kLength = "\r\nContent-Length: ";
  auto at = answer.find(kLength);
  std::size_t length = 0;
  if (at != std::string::npos && at < end) {
    const char* digits = answer.data() + at + kLength.size();
    std::from_chars(digits, answer.data() + end, length);
  }
  return answer.size() >= end + 4 + length;
}

void exchange(std::uint16_t port, std::string_view request) {
  const int fd = memwire::fuzz::connect_loopback(port);
  memwire::fuzz::send_draining(fd, request);
  std::string answer;
  while (!complete_response(answer)) {
    pollfd ready{fd, POLLIN, 0};
    if (memwire::fuzz::poll_one(ready, kQuietMs) <= 0) break;
    char chunk[65536];
    auto got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) break;
    answer.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(fd);
}

}  // namespace

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

  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (int requests = 0; requests < 16 && !input.empty(); ++requests) {
    auto end = input.find(kSeparator);
    exchange(endpoint.port(), input.substr(0, end));
    input.remove_prefix(end == std::string_view::npos ? input.size() : end + kSeparator.size());
  }
  return 0;
}
