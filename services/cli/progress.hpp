#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace memwire::cli {

// A one-line progress display on stderr, drawn when stderr is a terminal (or when asked):
// bytes done out of the total while the transfer runs, and at the end the same duration and
// rate that the program reports on stdout.
class Progress {
 public:
  Progress(std::string label, std::uint64_t total_bytes, bool enabled);
  // Redraws; `done` = bytes transferred so far, nullopt when unknown (a sweeping bar then).
  void tick(std::optional<std::uint64_t> done);
  // The final line; `took` is the transfer's duration, as reported elsewhere.
  void finish(bool succeeded, std::chrono::nanoseconds took);

  // The lines themselves (without "\r" or newline), for tests.
  static std::string running_line(const std::string& label, std::optional<std::uint64_t> done,
                                  std::uint64_t total, std::chrono::nanoseconds elapsed,
                                  unsigned frame);
  static std::string final_line(const std::string& label, bool succeeded, std::uint64_t total,
                                std::chrono::nanoseconds took);
  static std::string rate(std::uint64_t bytes, std::chrono::nanoseconds took);
  static std::string human(double bytes);

 private:
  std::string label_;
  std::uint64_t total_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool enabled_;
  unsigned frame_ = 0;
};

}  // namespace memwire::cli
