#pragma once

#include <chrono>
#include <cstdint>

namespace memwire {

// Wall-clock milliseconds since the Unix epoch: what metadata expiry is written in.
inline std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace memwire
