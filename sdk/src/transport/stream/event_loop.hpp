#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "util/file_descriptor.hpp"

namespace memwire::detail {

// One I/O thread: epoll over the descriptors added to it, an eventfd for tasks posted from
// other threads, and timers. Every callback runs on that thread, one at a time, so what a
// callback touches needs no lock against other callbacks of the same loop. Descriptors are
// watched edge-triggered: a callback reads or writes until EAGAIN.
//
// `busy_poll`: after poll_a_while(), the loop polls its descriptors (epoll_wait without
// sleeping) for that long before it sleeps, so that a peer's next request, when it comes
// within that time, is handled without the thread being woken (a wake-up is most of a small
// request's round trip here: on a VM's vCPUs, 5-20 us). Zero: it sleeps at once.
class EventLoop {
 public:
  using Task = std::function<void()>;
  using Ready = std::function<void(std::uint32_t events)>;
  using TimerId = std::uint64_t;

  explicit EventLoop(std::string thread_name,
                     std::chrono::microseconds busy_poll = std::chrono::microseconds::zero());
  // Runs the tasks still posted, then stops the thread; timers not yet due never run.
  // Descriptors still added are forgotten. Not on the loop thread.
  void stop();
  ~EventLoop() { stop(); }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watches `fd` for `events` (EPOLLIN, EPOLLOUT; edge-triggered) until remove(). Any thread.
  void add(int fd, std::uint32_t events, Ready ready);
  // Forgets `fd`; its callback is not called again (nor later in the batch being handled).
  // Loop thread only.
  void remove(int fd);
  // Watches an added `fd` for `events` from now on (edge-triggered; an event already pending
  // is reported at once). Loop thread only.
  void change(int fd, std::uint32_t events);
  // The same from any thread, for a caller that keeps `fd` open meanwhile (closed, its number
  // could be watched again for another descriptor). A descriptor not watched (yet, or any more)
  // is left alone.
  void change_from_any_thread(int fd, std::uint32_t events);
  // Runs `task` on the loop thread, after the callback running now. Any thread.
  void post(Task task);
  // Runs `task` on the loop thread once `delay` has passed, unless cancelled. Any thread.
  TimerId after(std::chrono::milliseconds delay, Task task);
  void cancel(TimerId timer);
  bool in_loop_thread() const noexcept { return std::this_thread::get_id() == thread_id_; }
  // The loop running the callback on this thread, if any.
  static EventLoop* current() noexcept;
  // Polls for `busy_poll` from now before sleeping again (see above). Loop thread only.
  void poll_a_while() {
    if (busy_poll_.count() > 0) poll_until_ = std::chrono::steady_clock::now() + busy_poll_;
  }

 private:
  void run();
  void wake();
  // Due timers, removed from the table: run outside the lock.
  std::vector<Task> take_due_timers(std::chrono::steady_clock::time_point now);
  int wait_timeout_ms() const;

  const std::chrono::microseconds busy_poll_;
  std::chrono::steady_clock::time_point poll_until_{};  // loop thread only
  FileDescriptor epoll_;
  FileDescriptor wake_;
  std::unordered_map<int, std::shared_ptr<Ready>> watched_;  // loop thread only

  std::mutex mutex_;
  std::vector<Task> posted_;
  // By when they are due, and (for cancel(): one per connection, many per second) by id.
  std::map<std::pair<std::chrono::steady_clock::time_point, TimerId>, Task> timers_;
  std::unordered_map<TimerId, std::chrono::steady_clock::time_point> timer_due_;
  TimerId next_timer_ = 1;
  bool stopping_ = false;
  // Set under mutex_ as the loop goes to sleep with nothing posted; cleared once it woke. A
  // post() that finds it clear needs no eventfd write: the loop looks at posted_ (under mutex_)
  // before it sleeps again.
  std::atomic<bool> asleep_{false};

  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace memwire::detail
