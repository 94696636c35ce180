// Metadata of a KV-cache-shaped transfer (many descriptors) against a 1-descriptor one: made
// (RdmaMetadata built and written as JSON), fetched by name over HTTP (HttpEndpoint +
// HttpChannel, one kept-alive connection) and over NATS (request/reply to the live publisher),
// and parsed (RdmaMetadata::from_json, also part of every fetch).
//
//   metadata_scale --nats URL [--descriptors 1,2048] [--iterations 300]
//
// Prints one line per size and, on its last line, all of it as JSON (microseconds, bytes).
#include <malloc.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "loopback_http.hpp"
#include "memwire/sideband/http.hpp"
#include "memwire/sideband/nats.hpp"
#include "sample_metadata.hpp"

using namespace memwire;
using namespace memwire::bench;
using namespace std::chrono_literals;

namespace {

// COUNT blocks of 8 KiB, every other one of a larger buffer (scattered), two offers.
RdmaMetadata kv_metadata(std::size_t count, std::uint64_t seed) {
  test_support::MetadataShape shape;
  shape.descriptors = count;
  shape.descriptor_size = 8192;
  shape.stride = 16384;
  shape.host = "bench";
  shape.offers = {TransportOffer{"tcp", "127.0.0.1:4711", {}, {}},
                  TransportOffer{"shm", "@memwire-bench", {}, {}}};
  return test_support::sample_metadata(seed, shape);
}

nlohmann::json figures(const Summary& s) {
  return {{"p50_us", s.median}, {"p99_us", s.p99}, {"min_us", s.min}, {"max_us", s.max}};
}

}  // namespace

int main(int argc, char** argv) {
  // A 2048-descriptor reply is ~105 KB: nats.c copies each into fresh heap memory, and glibc's
  // default (dynamic) trim threshold hands that memory back to the kernel between fetches about
  // half the time, so the copy page-faults (~7900 faults a run against ~1500) and the figure
  // jumps between ~0.5 and ~1.4 ms. A long-running worker's heap stays warm: keep it so here.
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  std::string url;
  std::vector<std::size_t> counts = {1, 2048};
  int iterations = 300;
  const bool parsed = parse_options(
      argc, argv, "metadata_scale",
      {{"--nats", [&](const std::string& value) { url = value; }},
       {"--descriptors",
        [&](const std::string& value) {
          counts.clear();
          for (const auto& item : split(value)) counts.push_back(std::stoul(item));
        }},
       {"--iterations", [&](const std::string& value) { iterations = iterations_of(value); }}});
  if (!parsed) return 2;
  if (url.empty()) {
    std::fprintf(stderr, "metadata_scale: --nats URL is required\n");
    return 2;
  }
  try {
    LoopbackHttp loopback;
    auto& http = *loopback.channel;
    sideband::NatsOptions nats_options;
    nats_options.servers = {url};
    nats_options.kv_bucket = "memwire_bench_scale";
    nats_options.subject_prefix = "memwire-bench-scale";
    sideband::NatsChannel owner(nats_options);
    sideband::NatsChannel reader(nats_options);

    nlohmann::json results = nlohmann::json::array();
    for (std::size_t count : counts) {
      const auto metadata = kv_metadata(count, count);
      const std::string document = metadata.to_json();
      const std::string name = "bench.scale" + std::to_string(count);
      http.publish(name, metadata, 0ms);
      owner.publish(name, metadata, 0ms);
      if (http.fetch(name, 5s) != metadata || reader.fetch(name, 5s) != metadata)
        throw std::runtime_error("fetched metadata differs from the published");
      const auto made = latency_us(iterations, iterations / 10 + 1, [&] {
        auto built = kv_metadata(count, count);
        auto text = built.to_json();
        asm volatile("" : : "r"(text.data()) : "memory");
      });
      const auto parsed = latency_us(iterations, iterations / 10 + 1, [&] {
        auto back = RdmaMetadata::from_json(document);
        asm volatile("" : : "r"(&back) : "memory");
      });
      const auto over_http =
          latency_us(iterations, iterations / 10 + 1, [&] { http.fetch(name, 5s); });
      const auto over_nats =
          latency_us(iterations, iterations / 10 + 1, [&] { reader.fetch(name, 5s); });
      std::printf(
          "%5zu descriptors  %7zu B  made p50 %8.1f us  parsed %8.1f us  HTTP fetch %8.1f us  "
          "NATS fetch %8.1f us\n",
          count, document.size(), made.median, parsed.median, over_http.median, over_nats.median);
      std::fflush(stdout);
      results.push_back({{"descriptors", count},
                         {"bytes", document.size()},
                         {"made", figures(made)},
                         {"parsed", figures(parsed)},
                         {"http_fetch", figures(over_http)},
                         {"nats_fetch", figures(over_nats)}});
      http.withdraw(name);
      owner.withdraw(name);
    }
    // A KV pool's metadata (80 layers x 2 x 2,000 blocks of 16 KiB), the same way: made,
    // parsed, fetched by name (fetch_pool) over HTTP and NATS.
    auto pool_metadata = [] {
      std::vector<RemoteRegion> regions;
      for (std::uint64_t r = 0; r < 160; ++r)
        regions.push_back({Device{}, 0x7f0000000000ull + r * 2000 * 16384, 16384, 16384, 2000});
      const std::string id(32, 'a');
      return PoolMetadata({.name = "kv",
                           .generation = 1,
                           .regions = std::move(regions),
                           .key = id,
                           .endpoint = {"bench",
                                        "bench",
                                        {TransportOffer{"tcp", "127.0.0.1:4711", {}, {}},
                                         TransportOffer{"shm", "@memwire-bench", {}, {}}}},
                           .token = id});
    };
    const auto pool = pool_metadata();
    const auto pool_document = pool.to_json();
    http.publish_pool("bench.pool", pool, 0ms);
    owner.publish_pool("bench.pool", pool, 0ms);
    if (http.fetch_pool("bench.pool", 5s) != pool || reader.fetch_pool("bench.pool", 5s) != pool)
      throw std::runtime_error("fetched pool metadata differs from the published");
    const auto pool_made = latency_us(iterations, iterations / 10 + 1, [&] {
      auto text = pool_metadata().to_json();
      asm volatile("" : : "r"(text.data()) : "memory");
    });
    const auto pool_parsed = latency_us(iterations, iterations / 10 + 1, [&] {
      auto back = PoolMetadata::from_json(pool_document);
      asm volatile("" : : "r"(&back) : "memory");
    });
    const auto pool_http =
        latency_us(iterations, iterations / 10 + 1, [&] { http.fetch_pool("bench.pool", 5s); });
    const auto pool_nats =
        latency_us(iterations, iterations / 10 + 1, [&] { reader.fetch_pool("bench.pool", 5s); });
    std::printf(
        "pool of 320,000 blocks  %zu B  made p50 %8.1f us  parsed %8.1f us  HTTP fetch_pool %8.1f "
        "us  NATS fetch_pool %8.1f us\n",
        pool_document.size(), pool_made.median, pool_parsed.median, pool_http.median,
        pool_nats.median);
    const nlohmann::json pool_row{
        {"blocks", pool.block_count()},     {"bytes", pool_document.size()},
        {"made", figures(pool_made)},       {"parsed", figures(pool_parsed)},
        {"http_fetch", figures(pool_http)}, {"nats_fetch", figures(pool_nats)}};
    http.withdraw_pool("bench.pool");
    owner.withdraw_pool("bench.pool");
    std::printf("%s\n",
                nlohmann::json{{"iterations", iterations}, {"results", results}, {"pool", pool_row}}
                    .dump()
                    .c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "metadata_scale: %s\n", error.what());
    return 1;
  }
  return 0;
}
