// What telemetry costs a small READ: 4 KiB READs one at a time, from begin_read until both
// sides completed, between two connectors with telemetry on and two with it off, in the same
// process and run. Rounds alternate (on/off, then off/on) so that drift in the machine's load
// hits both alike; each configuration's figure is the median of its rounds' p50s, and the
// rounds' min-max is the noise it is compared with.
//   telemetry_overhead [--transport tcp|shm] [--size 4096] [--rounds 10] [--samples 2000]
//                      [--warmup 200]
// Last line: the results as JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"

namespace {

using namespace memwire;
using Clock = std::chrono::steady_clock;

struct Pair {
  Connector owner, reader;
  explicit Pair(const ConnectorOptions& options) : owner(options), reader(options) {}
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// p50 in microseconds of `samples` READs after `warmup` unmeasured ones.
double round_p50(Pair& pair, std::size_t size, std::size_t samples, std::size_t warmup) {
  std::vector<std::byte> source(size, std::byte{1}), target(size);
  std::vector<double> us;
  us.reserve(samples);
  for (std::size_t i = 0; i < warmup + samples; ++i) {
    const auto start = Clock::now();
    auto readable = pair.owner.create_readable({Descriptor(std::span(source))});
    auto read = pair.reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    read.wait_for_completion(std::chrono::seconds(10));
    readable.wait_for_completion(std::chrono::seconds(10));
    if (i >= warmup)
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport = "tcp";
  std::size_t size = 4096, rounds = 10, samples = 2000, warmup = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--transport")
      transport = value;
    else if (key == "--size")
      size = std::stoul(value);
    else if (key == "--rounds")
      rounds = std::stoul(value);
    else if (key == "--samples")
      samples = std::stoul(value);
    else if (key == "--warmup")
      warmup = std::stoul(value);
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  ConnectorOptions on;
  on.transports = {transport};
  auto off = on;
  off.telemetry = false;
  Pair with(on), without(off);
  std::vector<double> on_p50, off_p50;
  for (std::size_t r = 0; r < rounds; ++r) {
    if (r % 2 == 0) {
      on_p50.push_back(round_p50(with, size, samples, warmup));
      off_p50.push_back(round_p50(without, size, samples, warmup));
    } else {
      off_p50.push_back(round_p50(without, size, samples, warmup));
      on_p50.push_back(round_p50(with, size, samples, warmup));
    }
  }
  const double on_median = median(on_p50), off_median = median(off_p50);
  auto [on_min, on_max] = std::minmax_element(on_p50.begin(), on_p50.end());
  auto [off_min, off_max] = std::minmax_element(off_p50.begin(), off_p50.end());
  std::printf(
      "%s READ %zu B, %zu rounds x %zu: telemetry on p50 %.1f us [%.1f-%.1f], off p50 "
      "%.1f us [%.1f-%.1f], difference %+.1f us (%+.1f%%)\n",
      transport.c_str(), size, rounds, samples, on_median, *on_min, *on_max, off_median, *off_min,
      *off_max, on_median - off_median, (on_median - off_median) / off_median * 100);
  const auto& counted = with.reader.telemetry().operations;
  std::uint64_t reads = 0;
  for (const auto& entry : counted) reads += entry.operations;
  nlohmann::json report{{"transport", transport},
                        {"size", size},
                        {"rounds", rounds},
                        {"samples", samples},
                        {"on_p50_us", on_p50},
                        {"off_p50_us", off_p50},
                        {"on_median_p50_us", on_median},
                        {"off_median_p50_us", off_median},
                        {"reads_counted_with_telemetry", reads}};
  std::printf("%s\n", report.dump().c_str());
  return reads == rounds * (samples + warmup) ? 0 : 1;
}
