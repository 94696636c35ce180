#include "common/signals.hpp"

#include <pthread.h>
#include <signal.h>

namespace memwire::services {
namespace {

// SIGUSR2 only tells the watcher to end when the program is done without a signal.
sigset_t watched() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher(std::function<void(int)> on_signal) {
  auto set = watched();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([set, on_signal = std::move(on_signal)] {
    int signal = 0;
    while (sigwait(&set, &signal) == 0) {
      if (signal == SIGUSR2) return;
      on_signal(signal);
    }
  });
}

SignalWatcher::~SignalWatcher() {
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

}  // namespace memwire::services
