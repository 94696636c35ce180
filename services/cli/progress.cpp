#include "cli/progress.hpp"

#include <algorithm>
#include <cstdio>

namespace memwire::cli {
namespace {

constexpr int kWidth = 30;

double seconds_of(std::chrono::nanoseconds span) {
  return std::chrono::duration<double>(span).count();
}

}  // namespace

std::string Progress::human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

Progress::Progress(std::string label, std::uint64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_(total_bytes), enabled_(enabled) {}

std::string Progress::rate(std::uint64_t bytes, std::chrono::nanoseconds took) {
  double seconds = std::max(1e-9, seconds_of(took));
  return human(static_cast<double>(bytes) / seconds) + "/s";
}

std::string Progress::running_line(const std::string& label, std::optional<std::uint64_t> done,
                                   std::uint64_t total, std::chrono::nanoseconds elapsed,
                                   unsigned frame) {
  std::string bar(kWidth, ' ');
  if (done && total > 0) {
    auto filled = static_cast<int>(static_cast<double>(std::min(*done, total)) * kWidth /
                                   static_cast<double>(total));
    std::fill_n(bar.begin(), filled, '=');
    if (filled < kWidth) bar[filled] = '>';
  } else {
    // Unknown progress: a block sweeping across the bar.
    int at = static_cast<int>(frame % (2 * kWidth - 8));
    if (at >= kWidth - 4) at = 2 * kWidth - 8 - at;
    for (int i = 0; i < 4; ++i) bar[at + i] = '=';
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1fs", seconds_of(elapsed));
  std::string amount = done ? human(static_cast<double>(std::min(*done, total))) + "/" +
                                  human(static_cast<double>(total))
                            : "?/" + human(static_cast<double>(total));
  return label + " [" + bar + "] " + amount + " " + seconds;
}

std::string Progress::final_line(const std::string& label, bool succeeded, std::uint64_t total,
                                 std::chrono::nanoseconds took) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2fs", seconds_of(took));
  if (!succeeded)
    return label + " [" + std::string(kWidth, ' ') + "] ?/" + human(static_cast<double>(total)) +
           " " + seconds + " failed";
  auto size = human(static_cast<double>(total));
  return label + " [" + std::string(kWidth, '=') + "] " + size + "/" + size + " " + seconds + " " +
         rate(total, took);
}

void Progress::tick(std::optional<std::uint64_t> done) {
  if (!enabled_) return;
  auto line =
      running_line(label_, done, total_, std::chrono::steady_clock::now() - started_, frame_++);
  // Padded: a shorter line must cover the longer one it redraws.
  std::fprintf(stderr, "\r%-*s", 80, line.c_str());
  std::fflush(stderr);
}

void Progress::finish(bool succeeded, std::chrono::nanoseconds took) {
  if (!enabled_) return;
  std::fprintf(stderr, "\r%-*s\n", 80, final_line(label_, succeeded, total_, took).c_str());
  std::fflush(stderr);
}

}  // namespace memwire::cli
