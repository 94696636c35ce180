#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "memwire/connector_options.hpp"
#include "transport/stream/event_loop.hpp"

namespace memwire::detail {

// A stream transport's event-loop threads, which every one of its connections and its listener
// share: a fixed few, whatever the number of peers (StreamOptions::io_threads), each polling
// StreamOptions::busy_poll after a lone small request.
class EventLoops {
 public:
  EventLoops(const std::string& thread_name, const StreamOptions& options);
  // Stops every loop (see EventLoop::stop). Not on one of them.
  void stop();

  // The first loop: it also watches the listener and keeps the accept side's state.
  EventLoop& listener() { return *loops_.front(); }
  // The loops in turn, for new connections.
  EventLoop& next() {
    return *loops_[next_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
  }

 private:
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace memwire::detail
