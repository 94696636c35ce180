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

#include "bench_support.hpp"
#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"
#include "sample_metadata.hpp"
#include "support/nats_server.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using namespace memwire::bench;

using memwire::bench::sample_metadata;

void run(LatencyOptions& given) {
  const int iterations = given.iterations;
  auto& url = given.nats_url;
  const auto server = memwire::test_support::private_server_unless_given(url);
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
    Summary stats;
  };
  std::vector<Row> rows;
  rows.push_back(
      {"request_reply", "fetch, live publisher answers on <prefix>.md.<name>",
       latency_us(iterations, iterations / 10 + 1, [&] { reader.fetch("bench.live", 2s); })});
  rows.push_back(
      {"kv", "fetch, no responders, then KV get (publisher gone)",
       latency_us(iterations, iterations / 10 + 1, [&] { reader.fetch("bench.stored", 2s); })});
  rows.push_back(
      {"kv_get", "wait_for on a present name: one KV get",
       latency_us(iterations, iterations / 10 + 1, [&] { reader.wait_for("bench.stored", 2s); })});
  rows.push_back({"service_request", "request() to serve(), no-op handler",
                  latency_us(iterations, iterations / 10 + 1,
                             [&] { reader.request("bench.get.x", writable, 2s); })});

  std::printf("NATS fetch latency, %d iterations each, server %s\n", iterations, url.c_str());
  for (const auto& row : rows) {
    std::printf("  %-16s median %8.1f us  p90 %8.1f us  p99 %8.1f us   %s\n", row.name,
                row.stats.median, row.stats.p90, row.stats.p99, row.what);
  }
  std::printf("{\"iterations\":%d", iterations);
  for (const auto& row : rows) {
    std::printf(",\"%s\":{\"median_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f}", row.name,
                row.stats.median, row.stats.p90, row.stats.p99);
  }
  std::printf("}\n");
  owner.withdraw("bench.live");
  reader.withdraw("bench.stored");
}

}  // namespace

int main(int argc, char** argv) {
  return latency_main(argc, argv, "nats_fetch_latency", true, run);
}
