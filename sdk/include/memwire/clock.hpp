#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace memwire {

// Wall-clock milliseconds since the Unix epoch: what metadata expiry is written in
// (RdmaMetadata::expires_at_ms).
inline std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What is left of a deadline, never negative: the timeout to hand the next call of a series.
// Rounded up: a part of a millisecond left is one, not zero, so that a caller polling until its
// deadline waits it out instead of spinning through its last millisecond with zero timeouts.
inline std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(
                                                    deadline - std::chrono::steady_clock::now()));
}

}  // namespace memwire
