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
#include "memwire/sideband/http.hpp"
#include "sample_metadata.hpp"

using namespace memwire;
using namespace memwire::bench;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  int iterations = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--iterations") {
      iterations = std::max(10, std::stoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "http_fetch_latency: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  try {
    sideband::HttpEndpoint endpoint;
    endpoint.start();
    sideband::HttpChannelOptions options;
    options.url = endpoint.url();
    sideband::HttpChannel channel(options);
    const auto metadata = sample_metadata();
    channel.publish("bench.live", metadata, 0ms);
    // Warm up the connection, and check what comes back once, outside the timed loop.
    for (int i = 0; i < iterations / 10 + 1; ++i) {
      if (channel.fetch("bench.live", 2s) != metadata) throw std::runtime_error("wrong metadata");
    }
    std::vector<double> samples;
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      channel.fetch("bench.live", 2s);
      samples.push_back(seconds_since(start) * 1e6);
    }
    const auto s = summarize(std::move(samples));
    std::printf("memwire HTTP fetch      p50 %7.1f us  p99 %7.1f us\n", s.median, s.p99);
    // What a fetch spends on checking and decoding the document, apart from the wire.
    const std::string document = metadata.to_json();
    std::vector<double> parses;
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      auto parsed = RdmaMetadata::from_json(document);
      parses.push_back(seconds_since(start) * 1e6);
      asm volatile("" : : "r"(&parsed) : "memory");
    }
    const auto p = summarize(std::move(parses));
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
  } catch (const std::exception& error) {
    std::fprintf(stderr, "http_fetch_latency: %s\n", error.what());
    return 1;
  }
  return 0;
}
