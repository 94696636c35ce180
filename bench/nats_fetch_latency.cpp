// Median latency of fetching a name over NATS: request/reply to the live publisher, and the
// JetStream KV registry (publisher gone), plus wait_for on a present name and a request().
//
//   nats_fetch_latency [--nats URL] [--iterations N]
//
// Without --nats it starts a private nats-server (JetStream, temporary store) on loopback.
// Prints one line per path and, last, the same as JSON.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"
#include "sample_metadata.hpp"
#include "support/nats_server.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using memwire::bench::sample_metadata;

struct Stats {
  double median_us, p90_us, p99_us;
};

template <class F>
Stats measure(int iterations, F&& call) {
  for (int i = 0; i < iterations / 10 + 1; ++i) call();  // warm up connections and caches
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    call();
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) { return samples[static_cast<std::size_t>(q * (samples.size() - 1))]; };
  return {at(0.5), at(0.9), at(0.99)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  int iterations = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--nats" && i + 1 < argc) {
      url = argv[++i];
    } else if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::max(10, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--nats URL] [--iterations N]\n", argv[0]);
      return 2;
    }
  }
  try {
    std::unique_ptr<memwire::test_support::NatsServer> server;
    if (url.empty()) {
      server = std::make_unique<memwire::test_support::NatsServer>();
      url = server->url();
    }
    NatsOptions options;
    options.servers = {url};
    options.kv_bucket = "memwire_bench";
    options.subject_prefix = "memwire-bench";

    NatsChannel owner(options);
    NatsChannel reader(options);
    owner.publish("bench.live", sample_metadata(1), 0ms);
    {
      NatsChannel gone(options);  // its publisher leaves: only the KV registry answers
      gone.publish("bench.stored", sample_metadata(2), 0ms);
    }
    auto subscription = owner.serve("bench.get", [](const std::string&, const RdmaMetadata&) {});
    const auto writable = sample_metadata(3, OperationKind::Write);

    struct Row {
      const char* name;
      const char* what;
      Stats stats;
    };
    std::vector<Row> rows;
    rows.push_back({"request_reply", "fetch, live publisher answers on <prefix>.md.<name>",
                    measure(iterations, [&] { reader.fetch("bench.live", 2s); })});
    rows.push_back({"kv", "fetch, no responders, then KV get (publisher gone)",
                    measure(iterations, [&] { reader.fetch("bench.stored", 2s); })});
    rows.push_back({"kv_get", "wait_for on a present name: one KV get",
                    measure(iterations, [&] { reader.wait_for("bench.stored", 2s); })});
    rows.push_back({"service_request", "request() to serve(), no-op handler",
                    measure(iterations, [&] { reader.request("bench.get.x", writable, 2s); })});

    std::printf("NATS fetch latency, %d iterations each, server %s\n", iterations, url.c_str());
    for (const auto& row : rows) {
      std::printf("  %-16s median %8.1f us  p90 %8.1f us  p99 %8.1f us   %s\n", row.name,
                  row.stats.median_us, row.stats.p90_us, row.stats.p99_us, row.what);
    }
    std::printf("{\"iterations\":%d", iterations);
    for (const auto& row : rows) {
      std::printf(",\"%s\":{\"median_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f}", row.name,
                  row.stats.median_us, row.stats.p90_us, row.stats.p99_us);
    }
    std::printf("}\n");
    owner.withdraw("bench.live");
    reader.withdraw("bench.stored");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nats_fetch_latency: %s\n", error.what());
    return 1;
  }
  return 0;
}
