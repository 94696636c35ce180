// Latency of fetching a name over HTTP: an embedded HttpEndpoint on loopback and an HttpChannel
// that fetches the published metadata again and again (one kept-alive connection).
//
//   http_fetch_latency [--iterations 2000]
//
// Prints one line and, on its last line, the same as JSON (microseconds), in the shape of
// nats_fetch_latency's output.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_support.hpp"
#include "loopback_http.hpp"
#include "memwire/sideband/http.hpp"
#include "sample_metadata.hpp"

using namespace memwire;
using namespace memwire::bench;
using namespace std::chrono_literals;

namespace {

void run(LatencyOptions& given) {
  const int iterations = given.iterations;
  LoopbackHttp http;
  auto& channel = *http.channel;
  const auto metadata = sample_metadata();
  channel.publish("bench.live", metadata, 0ms);
  // Warm up the connection, and check what comes back once, outside the timed loop.
  for (int i = 0; i < iterations / 10 + 1; ++i) {
    if (channel.fetch("bench.live", 2s) != metadata) throw std::runtime_error("wrong metadata");
  }
  const auto s = latency_us(iterations, 0, [&] { channel.fetch("bench.live", 2s); });
  std::printf("memwire HTTP fetch      p50 %7.1f us  p99 %7.1f us\n", s.median, s.p99);
  // What a fetch spends on checking and decoding the document, apart from the wire.
  const std::string document = metadata.to_json();
  const auto p = latency_us(iterations, 0, [&] {
    auto parsed = RdmaMetadata::from_json(document);
    asm volatile("" : : "r"(&parsed) : "memory");
  });
  std::printf("  of which RdmaMetadata::from_json  p50 %5.1f us\n", p.median);
  channel.withdraw("bench.live");
  nlohmann::json report = {{"iterations", iterations},
                           {"fetch",
                            {{"median_us", s.median},
                             {"p90_us", s.p90},
                             {"p99_us", s.p99},
                             {"min_us", s.min},
                             {"max_us", s.max}}},
                           {"from_json", {{"median_us", p.median}, {"p99_us", p.p99}}}};
  std::printf("%s\n", report.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return latency_main(argc, argv, "http_fetch_latency", false, run);
}
