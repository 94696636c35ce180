// Baseline: single-thread memcpy between two buffers of each size, in GB/s (bytes copied per
// second). Small sizes stay in cache, as the same-size memwire transfers' sources may too.
//
//   memcpy_bandwidth [--sizes 4K,...,1G] [--trials 5] [--large-trials 3] [--target-bytes 256M]
//
// Prints one line per size and, on its last line, all of it as JSON.
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_support.hpp"

using namespace memwire::bench;

int main(int argc, char** argv) {
  auto sizes = parse_sizes("4K,64K,1M,16M,64M,256M,1G");
  int trials = 5, large_trials = 3;
  std::size_t target_bytes = 256ull << 20;
  const bool parsed = parse_options(
      argc, argv, "memcpy_bandwidth",
      {{"--sizes", [&](const std::string& value) { sizes = parse_sizes(value); }},
       {"--trials", [&](const std::string& value) { trials = std::stoi(value); }},
       {"--large-trials", [&](const std::string& value) { large_trials = std::stoi(value); }},
       {"--target-bytes",
        [&](const std::string& value) { target_bytes = parse_sizes(value).at(0); }}});
  if (!parsed) return 2;
  nlohmann::json results = nlohmann::json::array();
  for (std::size_t size : sizes) {
    PageBuffer source(size), target(size);
    std::memset(source.data(), 0x5a, size);  // touch both: page faults are not memcpy's cost
    std::memset(target.data(), 0, size);
    const std::size_t reps = std::max<std::size_t>(1, target_bytes / size);
    auto copy = [&] {
      std::memcpy(target.data(), source.data(), size);
      // The copy's result is never read: keep the compiler from dropping it.
      asm volatile("" : : "r"(target.data()) : "memory");
    };
    copy();
    std::vector<double> gbps;
    const int count = size >= (256ull << 20) ? large_trials : trials;
    for (int t = 0; t < count; ++t) {
      const auto start = Clock::now();
      for (std::size_t r = 0; r < reps; ++r) copy();
      gbps.push_back(static_cast<double>(reps * size) / seconds_since(start) / 1e9);
    }
    const auto s = summarize(gbps);
    std::printf("memcpy %10zu B  %8.3f GB/s [%.3f-%.3f]\n", size, s.median, s.min, s.max);
    std::fflush(stdout);
    results.push_back({{"size", size},
                       {"trials", gbps},
                       {"gbps", {{"median", s.median}, {"min", s.min}, {"max", s.max}}}});
  }
  std::printf("%s\n", nlohmann::json{{"memcpy", results}}.dump().c_str());
  return 0;
}
