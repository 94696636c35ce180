// GPU -> GPU through memwire against the driver's own copies, in one run on one GPU:
//
//   cuda_transfer_bench [--sizes 1M,16M,256M] [--trials 5] [--transports tcp,shm]
//
// One memwire figure is a whole operation as an application sees it: create_readable over
// device memory (its bytes staged to pinned host memory), begin_read into device memory on
// another connector, until both sides completed. Baselines, same sizes and trials:
// cuMemcpyDtoD (device to device) and cuMemcpyHtoD from pinned host memory. Prints one line
// per figure with the ratios memwire/DtoD and memwire/HtoD and, on its last line, all as JSON.
// The same operation between host buffers ("host->host") shows what the transport alone costs.
// Without a CUDA driver it says so and exits 0 (nothing measured).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "memwire/memwire.hpp"

namespace {

using namespace memwire;
using memwire::detail::CudaDriver;
using Clock = std::chrono::steady_clock;

std::size_t parse_size(const std::string& text) {
  std::size_t unit = 1;
  std::string digits = text;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'M' || text.back() == 'G')) {
    unit = text.back() == 'K' ? 1u << 10 : text.back() == 'M' ? 1u << 20 : 1u << 30;
    digits.pop_back();
  }
  return std::stoull(digits) * unit;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// The median of `trials` runs of `step`, in seconds.
template <class Step>
double median_seconds(unsigned trials, Step&& step) {
  step();  // warm-up: connections, contexts, first-touch
  std::vector<double> seconds;
  for (unsigned i = 0; i < trials; ++i) {
    const auto start = Clock::now();
    step();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes{1u << 20, 16u << 20, 256u << 20};
  std::vector<std::string> transports{"tcp", "shm"};
  unsigned trials = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--sizes") {
      sizes.clear();
      for (const auto& size : split(value)) sizes.push_back(parse_size(size));
    } else if (flag == "--trials") {
      trials = static_cast<unsigned>(std::stoul(value));
    } else if (flag == "--transports") {
      transports = split(value);
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  const auto* driver = CudaDriver::get();
  if (driver == nullptr) {
    std::cout << "no CUDA device: " << CudaDriver::unavailable_reason() << " (nothing measured)\n";
    std::cout << nlohmann::json{{"available", false}}.dump() << "\n";
    return 0;
  }
  driver->use_device(0);
  nlohmann::json results = nlohmann::json::array();
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  void* source = driver->allocate_device(largest);
  void* target = driver->allocate_device(largest);
  void* pinned = driver->allocate_pinned(largest);
  std::vector<std::byte> host_source(largest, std::byte{1}), host_target(largest);
  for (const auto size : sizes) {
    const double dtod =
        median_seconds(trials, [&] { driver->copy_device_to_device(target, source, size); });
    const double htod =
        median_seconds(trials, [&] { driver->copy_to_device(target, pinned, size); });
    for (const auto& transport : transports) {
      ConnectorOptions options;
      options.transports = {transport};
      Connector owner(options), reader(options);
      const Device gpu(DeviceKind::Cuda, 0);
      const auto operation = [&](const Descriptor& from, const Descriptor& into) {
        return median_seconds(trials, [&] {
          auto readable = owner.create_readable({from});
          auto read = reader.begin_read(readable.metadata(), {into});
          read.wait_for_completion(std::chrono::minutes(2));
          readable.wait_for_completion(std::chrono::minutes(2));
        });
      };
      const double memwire =
          operation(Descriptor(source, size, gpu), Descriptor(target, size, gpu));
      const double host_only =
          operation(Descriptor(host_source.data(), size), Descriptor(host_target.data(), size));
      const auto rate = [&](double seconds) { return static_cast<double>(size) / seconds / 1e9; };
      std::printf(
          "%-4s %9zu B  memwire gpu->gpu %7.2f GB/s (host->host %6.2f)  cuMemcpyDtoD %8.2f GB/s  "
          "cuMemcpyHtoD %6.2f GB/s  memwire/DtoD %.4f  memwire/HtoD %.3f\n",
          transport.c_str(), size, rate(memwire), rate(host_only), rate(dtod), rate(htod),
          dtod / memwire, htod / memwire);
      results.push_back({{"transport", transport},
                         {"bytes", size},
                         {"memwire_gbps", rate(memwire)},
                         {"memwire_host_gbps", rate(host_only)},
                         {"dtod_gbps", rate(dtod)},
                         {"htod_gbps", rate(htod)},
                         {"ratio_dtod", dtod / memwire},
                         {"ratio_htod", htod / memwire}});
    }
  }
  driver->free_pinned(pinned, largest);
  driver->free_device(target);
  driver->free_device(source);
  std::cout << nlohmann::json{{"available", true}, {"results", results}}.dump() << "\n";
  return 0;
}
