#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace memwire::cli {

// A one-line progress display on stderr, drawn only when stderr is a terminal. memwire reports
// no byte counts mid-transfer, so it shows the size, elapsed time and, at the end, the rate.
class Progress {
 public:
  Progress(std::string label, std::uint64_t total_bytes);
  void tick();                  // redraw while waiting
  void finish(bool succeeded);  // final line (terminal) or nothing
  static std::string rate(std::uint64_t bytes, std::chrono::nanoseconds took);

 private:
  std::string label_;
  std::uint64_t total_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool enabled_;
  unsigned frame_ = 0;
};

}  // namespace memwire::cli
