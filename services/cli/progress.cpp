#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace memwire::cli {
namespace {

constexpr int kWidth = 30;

std::string human(double bytes) {
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

}  // namespace

Progress::Progress(std::string label, std::uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), enabled_(isatty(STDERR_FILENO) == 1) {}

std::string Progress::rate(std::uint64_t bytes, std::chrono::nanoseconds took) {
  double seconds = std::max(1e-9, std::chrono::duration<double>(took).count());
  return human(static_cast<double>(bytes) / seconds) + "/s";
}

void Progress::tick() {
  if (!enabled_) return;
  // Unknown progress: a block sweeping across the bar.
  std::string bar(kWidth, ' ');
  int at = static_cast<int>(frame_++ % (2 * kWidth - 8));
  if (at >= kWidth - 4) at = 2 * kWidth - 8 - at;
  for (int i = 0; i < 4; ++i) bar[at + i] = '=';
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::fprintf(stderr, "\r%s [%s] %s %.1fs ", label_.c_str(), bar.c_str(),
               human(static_cast<double>(total_)).c_str(), elapsed);
  std::fflush(stderr);
}

void Progress::finish(bool succeeded) {
  if (!enabled_) return;
  auto took = std::chrono::steady_clock::now() - started_;
  std::string bar(kWidth, succeeded ? '=' : ' ');
  std::fprintf(stderr, "\r%s [%s] %s %.2fs %s%s\n", label_.c_str(), bar.c_str(),
               human(static_cast<double>(total_)).c_str(),
               std::chrono::duration<double>(took).count(),
               succeeded ? rate(total_, took).c_str() : "", succeeded ? "" : "failed");
  std::fflush(stderr);
}

}  // namespace memwire::cli
