#pragma once

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/file_descriptor.hpp"

namespace memwire::detail::verbs {

// The verbs transport's progress thread: one epoll over the completion channel, the rdma_cm
// event channel, the device's async events and a timer, plus an eventfd that wakes it for
// queued commands and for stopping. It sleeps in epoll_wait until something happens: no busy
// loop. Handlers and commands run on this thread only, so the state they touch needs no lock.
class ProgressLoop {
 public:
  ProgressLoop();
  ~ProgressLoop();
  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  // Calls `on_readable` on the loop thread whenever `fd` is readable. Only before start().
  void watch(int fd, std::function<void()> on_readable);
  void start();
  // Joins the thread; commands still queued are dropped. Idempotent.
  void stop();

  // Runs `command` on the loop thread soon; false (and dropped) once stopping. Any thread.
  bool post(std::function<void()> command);
  bool on_loop_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }
  // Whether the calling thread is any connector's verbs progress thread.
  static bool on_a_progress_thread() noexcept;

 private:
  void run();
  void run_commands();

  FileDescriptor epoll_;
  FileDescriptor wake_;
  std::vector<std::function<void()>> handlers_;
  std::thread thread_;
  std::mutex mutex_;
  bool stopping_ = false;
  std::vector<std::function<void()>> commands_;
};

}  // namespace memwire::detail::verbs
