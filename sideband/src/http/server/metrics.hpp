#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace memwire::sideband::http {

// Request counters and latency sums per route, rendered as Prometheus text.
class Metrics {
 public:
  // "/v1/metadata/x" -> "metadata"; keeps the label set small whatever the names are.
  static std::string route_of(const std::string& method, const std::string& path);

  void record(const std::string& method, const std::string& path, int status,
              std::chrono::microseconds duration);
  // `gauges` are appended as they are ("memwire_names 3").
  std::string render(const std::map<std::string, double>& gauges);

 private:
  struct Latency {
    double seconds = 0;
    unsigned long long count = 0;
  };
  std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, unsigned long long> counts_;
  std::map<std::string, Latency> latency_;
};

}  // namespace memwire::sideband::http
