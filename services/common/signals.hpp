#pragma once

#include <functional>
#include <thread>

namespace memwire::services {

// Blocks SIGINT and SIGTERM in every thread (call it before starting any) and runs `on_signal`
// on a dedicated thread when one arrives: no async-signal-safety puzzles in the handlers.
class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void(int signal)> on_signal);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  std::thread thread_;
};

}  // namespace memwire::services
