#include "transport/stream/event_loops.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace memwire::detail {
namespace {

// 0 = half the CPUs, 1 to 8; at most 64 when asked for.
unsigned loop_count(const StreamOptions& options) {
  if (options.io_threads > 0) return std::min(options.io_threads, 64u);
  return std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u);
}

// At most 10 ms: a loop must not spin for ever on a mistyped setting.
std::chrono::microseconds busy_poll(const StreamOptions& options) {
  return std::clamp(options.busy_poll, std::chrono::microseconds::zero(),
                    std::chrono::microseconds(std::chrono::milliseconds(10)));
}

}  // namespace

EventLoops::EventLoops(const std::string& thread_name, const StreamOptions& options) {
  for (unsigned n = 0; n < loop_count(options); ++n)
    loops_.push_back(std::make_unique<EventLoop>(thread_name, busy_poll(options)));
}

void EventLoops::stop() {
  for (auto& loop : loops_) loop->stop();
}

}  // namespace memwire::detail
