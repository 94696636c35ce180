#include "transport/stream/event_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "core/access_gate.hpp"
#include "memwire/error.hpp"
#include "util/test_hooks.hpp"
#include "util/thread_name.hpp"

namespace memwire::detail {

namespace {

thread_local EventLoop* running_loop = nullptr;

}  // namespace

EventLoop::EventLoop(std::string thread_name, std::chrono::microseconds busy_poll)
    : busy_poll_(busy_poll),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_ || !wake_) throw Error(ErrorCode::Transport, "cannot create an event loop");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &event) != 0)
    throw Error(ErrorCode::Transport, "cannot watch the event loop's eventfd");
  std::lock_guard lock(mutex_);  // thread_id_ is read by callbacks, which lock it first
  thread_ = std::thread([this, name = std::move(thread_name)] {
    name_this_thread(name.c_str());
    running_loop = this;
    // Frames queued on this loop's connections hold pins only this thread can let go of.
    AccessGate::break_at_once_on_this_thread(true);
    run();
    running_loop = nullptr;
  });
  thread_id_ = thread_.get_id();
}

void EventLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

EventLoop* EventLoop::current() noexcept { return running_loop; }

void EventLoop::add(int fd, std::uint32_t events, Ready ready) {
  auto callback = std::make_shared<Ready>(std::move(ready));
  post([this, fd, events, callback = std::move(callback)] {
    epoll_event event{};
    event.events = events | EPOLLET;
    event.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      // Not watched: tell the owner at once, as a hang-up.
      (*callback)(EPOLLHUP | EPOLLERR);
      return;
    }
    watched_[fd] = callback;
  });
}

void EventLoop::remove(int fd) {
  if (watched_.erase(fd) > 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::change(int fd, std::uint32_t events) {
  if (!watched_.contains(fd)) return;
  change_from_any_thread(fd, events);
}

void EventLoop::change_from_any_thread(int fd, std::uint32_t events) {
  epoll_event event{};
  event.events = events | EPOLLET;
  event.data.fd = fd;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event);
}

void EventLoop::post(Task task) {
  bool asleep = false;
  {
    std::lock_guard lock(mutex_);
    posted_.push_back(std::move(task));
    asleep = asleep_.load(std::memory_order_relaxed);
  }
  if (asleep) wake();  // awake, it runs the task before it sleeps: no eventfd write
}

EventLoop::TimerId EventLoop::after(std::chrono::milliseconds delay, Task task) {
  const auto due = std::chrono::steady_clock::now() + delay;
  TimerId id = 0;
  bool asleep = false;
  {
    std::lock_guard lock(mutex_);
    id = next_timer_++;
    timers_.emplace(std::make_pair(due, id), std::move(task));
    timer_due_.emplace(id, due);
    asleep = asleep_.load(std::memory_order_relaxed);
  }
  // Asleep with a later deadline, the loop must recompute its wait; awake (on the loop itself,
  // say) it does so before it next waits.
  if (asleep) wake();
  return id;
}

void EventLoop::cancel(TimerId timer) {
  std::lock_guard lock(mutex_);
  if (auto found = timer_due_.find(timer); found != timer_due_.end()) {
    timers_.erase({found->second, timer});
    timer_due_.erase(found);
  }
}

void EventLoop::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(wake_.get(), &one, sizeof one);
}

std::vector<EventLoop::Task> EventLoop::take_due_timers(std::chrono::steady_clock::time_point now) {
  std::vector<Task> due;
  std::lock_guard lock(mutex_);
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    timer_due_.erase(timers_.begin()->first.second);
    due.push_back(std::move(timers_.begin()->second));
    timers_.erase(timers_.begin());
  }
  return due;
}

int EventLoop::wait_timeout_ms() const {
  if (timers_.empty()) return -1;
  const auto left = timers_.begin()->first.first - std::chrono::steady_clock::now();
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms, 60'000));
}

void EventLoop::run() {
  std::array<epoll_event, 64> events;
  for (;;) {
    int timeout = -1;
    {
      std::lock_guard lock(mutex_);
      if (stopping_ && posted_.empty()) return;
      timeout = posted_.empty() ? wait_timeout_ms() : 0;
      // Polling, it is awake: a post() needs no eventfd write, it is seen on the next turn.
      if (timeout != 0 && busy_poll_.count() > 0 &&
          std::chrono::steady_clock::now() < poll_until_) {
        timeout = 0;
        test_hooks::busy_polls.fetch_add(1, std::memory_order_relaxed);
      }
      asleep_.store(timeout != 0, std::memory_order_relaxed);
    }
    const int ready = ::epoll_wait(epoll_.get(), events.data(), events.size(), timeout);
    asleep_.store(false, std::memory_order_relaxed);
    if (ready < 0 && errno != EINTR) return;
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_.get()) {
        std::uint64_t count;
        [[maybe_unused]] auto drained = ::read(wake_.get(), &count, sizeof count);
        continue;
      }
      // Held for the call: the callback may remove itself.
      auto found = watched_.find(fd);
      if (found == watched_.end()) continue;
      auto callback = found->second;
      (*callback)(events[i].events);
    }
    std::vector<Task> tasks;
    {
      std::lock_guard lock(mutex_);
      tasks.swap(posted_);
    }
    for (auto& task : tasks) task();
    for (auto& task : take_due_timers(std::chrono::steady_clock::now())) task();
  }
}

}  // namespace memwire::detail
