#pragma once
// The listener's refused connections, lingering half-open a moment (refuse_connection shut
// their writing half): closed at once, the peer's next send could meet a reset before its
// reader saw the refusal. A bounded number linger; the oldest goes first to make room.

#include <chrono>
#include <cstddef>
#include <deque>
#include <utility>

#include "transport/stream/event_loop.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {

class RefusedSockets {
 public:
  static constexpr auto kLinger = std::chrono::milliseconds(200);
  static constexpr std::size_t kMostLingering = 64;

  // `loop` runs every call and timer here; it outlives this.
  explicit RefusedSockets(EventLoop& loop) : loop_(loop) {}

  // On the loop: keeps `socket` open for kLinger, then closes it.
  void linger(FileDescriptor socket) {
    if (lingering_.size() == kMostLingering) lingering_.pop_front();
    lingering_.emplace_back(std::move(socket), std::chrono::steady_clock::now() + kLinger);
    // Each timer closes what has lingered long enough (the oldest may already have gone to
    // make room): never one refused later than itself.
    loop_.after(kLinger, [this] {
      const auto now = std::chrono::steady_clock::now();
      while (!lingering_.empty() && lingering_.front().second <= now) lingering_.pop_front();
    });
  }

 private:
  EventLoop& loop_;
  std::deque<std::pair<FileDescriptor, std::chrono::steady_clock::time_point>> lingering_;
};

}  // namespace memwire::detail
