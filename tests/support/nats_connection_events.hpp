#pragma once
// Counts a NatsChannel's connection events, so that a test can wait for "reconnected" without
// polling.

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "memwire/sideband/nats.hpp"

namespace memwire::test_support {

struct NatsConnectionEvents {
  std::mutex mutex;
  std::condition_variable changed;
  int disconnected = 0;
  int reconnected = 0;

  // Counts the events of the channel that `options` will make.
  void hook(sideband::NatsOptions& options) {
    options.on_disconnected = [this] { count(disconnected); };
    options.on_reconnected = [this] { count(reconnected); };
  }
  // Whether it reconnected `count` times within `timeout`.
  bool wait_reconnected(int times, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return reconnected >= times; });
  }

 private:
  void count(int& events) {
    std::lock_guard lock(mutex);
    ++events;
    changed.notify_all();
  }
};

}  // namespace memwire::test_support
