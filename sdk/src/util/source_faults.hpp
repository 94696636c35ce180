#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <string>

namespace memwire::detail {

// Faults per source address (connections that ended in a remote access error, a flushed QP or
// garbage) within a sliding window: a source with `limit` of them in the window is refused
// until the oldest one leaves it, so a peer that guesses keys pays a window per `limit`
// guesses instead of one reconnect each. Bounded: at most kMaxSources addresses are tracked
// (the stalest dropped first), at most `limit` faults each. Not thread-safe.
class SourceFaults {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMaxSources = 4096;

  // `limit` 0 = never refuse (faults are still counted).
  SourceFaults(std::size_t limit, Clock::duration window) : limit_(limit), window_(window) {}

  // Records a fault of `source`; returns its faults within the window, this one included.
  std::size_t record(const std::string& source, Clock::time_point now);
  // Whether `source` is refused now; `first`: for the first time since it was last accepted
  // (what a log says once, not at every attempt).
  struct Refusal {
    bool refused = false;
    bool first = false;
  };
  Refusal refused(const std::string& source, Clock::time_point now);
  std::size_t limit() const noexcept { return limit_; }
  Clock::duration window() const noexcept { return window_; }

 private:
  struct Source {
    std::deque<Clock::time_point> faults;  // the last ones, oldest first
    bool reported = false;                 // its refusal was reported
  };
  void expire(std::deque<Clock::time_point>& faults, Clock::time_point now) const;

  const std::size_t limit_;
  const Clock::duration window_;
  std::map<std::string, Source> sources_;
};

}  // namespace memwire::detail
