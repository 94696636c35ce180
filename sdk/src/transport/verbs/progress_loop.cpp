#include "transport/verbs/progress_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "memwire/error.hpp"
#include "util/file_descriptor.hpp"
#include "util/thread_name.hpp"

namespace memwire::detail::verbs {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw Error(ErrorCode::Transport, what + ": " + std::strerror(errno));
}

// The wake-up eventfd's slot in handlers_ is marked by this index.
constexpr std::uint64_t kWakeTag = UINT64_MAX;

// The loop whose work this thread holds, if any.
thread_local const ProgressLoop* working_on = nullptr;

}  // namespace

struct ProgressLoop::Shared {
  FileDescriptor epoll{::epoll_create1(EPOLL_CLOEXEC)};
  FileDescriptor wake{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  std::mutex mutex;  // stopping and commands
  bool stopping = false;
  std::vector<std::function<void()>> commands;
  // Held by whichever thread runs handlers and commands (see Work).
  std::mutex work;
  // The loop's thread waits for the work: others let it go first (timers, rdma_cm events and
  // commands of other threads are its alone to handle, however often a caller takes the work).
  std::atomic<bool> loop_waits{false};

  void wake_up() const {
    const std::uint64_t one = 1;
    // An eventfd write only fails when the counter would overflow: it is then readable anyway.
    [[maybe_unused]] auto written = ::write(wake.get(), &one, sizeof one);
  }
  bool stopped() {
    std::lock_guard lock(mutex);
    return stopping;
  }
  // With the work held: runs the commands queued so far (none once stopping). The wake-up is
  // read first: a command queued after it wakes the loop again.
  void run_commands() {
    std::uint64_t count = 0;
    [[maybe_unused]] auto drained = ::read(wake.get(), &count, sizeof count);
    std::vector<std::function<void()>> batch;
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      batch.swap(commands);
    }
    for (auto& command : batch) command();
  }
};

ProgressLoop::ProgressLoop() : shared_(std::make_shared<Shared>()) {
  if (!shared_->epoll) throw_errno("epoll_create1");
  if (!shared_->wake) throw_errno("eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  if (::epoll_ctl(shared_->epoll.get(), EPOLL_CTL_ADD, shared_->wake.get(), &event) != 0)
    throw_errno("epoll_ctl");
}

ProgressLoop::~ProgressLoop() { stop(); }

int ProgressLoop::commands_fd() const noexcept { return shared_->wake.get(); }

void ProgressLoop::watch(int fd, std::function<void()> on_readable) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = handlers_.size();
  if (::epoll_ctl(shared_->epoll.get(), EPOLL_CTL_ADD, fd, &event) != 0) throw_errno("epoll_ctl");
  handlers_.push_back(std::move(on_readable));
  watched_fds_.push_back(fd);
}

void ProgressLoop::set_watched(int fd, bool watched) {
  const auto found = std::find(watched_fds_.begin(), watched_fds_.end(), fd);
  if (found == watched_fds_.end()) return;
  epoll_event event{};
  event.events = watched ? static_cast<std::uint32_t>(EPOLLIN) : 0u;
  event.data.u64 = static_cast<std::uint64_t>(found - watched_fds_.begin());
  ::epoll_ctl(shared_->epoll.get(), EPOLL_CTL_MOD, fd, &event);
}

void ProgressLoop::start() {
  thread_ = std::thread(
      [shared = shared_, handlers = &handlers_, self = this] { run(shared, handlers, self); });
}

bool ProgressLoop::stopping() const { return shared_->stopped(); }

void ProgressLoop::stop() {
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->stopping && !thread_.joinable()) return;
    shared_->stopping = true;
  }
  shared_->wake_up();
  if (thread_.joinable()) {
    // Stopping from a handler (e.g. a completion callback dropping the last connector handle)
    // cannot join itself, nor the loop's thread while that waits for the work this thread
    // holds; the thread sees stopping as soon as it runs again, and touches nothing of the
    // loop but what it shares with it.
    if (on_loop_thread() || holds_work())
      thread_.detach();
    else
      thread_.join();
  }
  std::lock_guard lock(shared_->mutex);
  shared_->commands.clear();
}

bool ProgressLoop::post(std::function<void()> command) {
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->stopping) return false;
    shared_->commands.push_back(std::move(command));
  }
  shared_->wake_up();
  return true;
}

void ProgressLoop::run_commands() { shared_->run_commands(); }

bool ProgressLoop::commands_queued() const {
  std::lock_guard lock(shared_->mutex);
  return !shared_->commands.empty();
}

ProgressLoop::Work::~Work() {
  if (loop_ == nullptr) return;
  working_on = outer_;
  loop_->shared_->work.unlock();
}

ProgressLoop::Work ProgressLoop::try_take_work() {
  if (working_on != nullptr || shared_->loop_waits.load(std::memory_order_relaxed) ||
      !shared_->work.try_lock())
    return Work();
  working_on = this;
  return Work(this, nullptr);
}

ProgressLoop::Work ProgressLoop::take_work() {
  shared_->work.lock();
  const auto* outer = std::exchange(working_on, this);
  return Work(this, outer);
}

bool ProgressLoop::runs_work_here() noexcept { return working_on != nullptr; }

bool ProgressLoop::holds_work() const noexcept { return working_on == this; }

void ProgressLoop::run(const std::shared_ptr<Shared>& shared,
                       const std::vector<std::function<void()>>* handlers,
                       const ProgressLoop* self) {
  name_this_thread("memwire-verbs");
  epoll_event events[16];
  for (;;) {
    if (shared->stopped()) return;
    const int ready = ::epoll_wait(shared->epoll.get(), events, 16, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;  // only on a broken epoll fd: nothing sensible is left to do
    }
    // A thread that took the work meanwhile may have handled these events already: handlers
    // read until there is nothing left, so one that finds nothing returns at once.
    shared->loop_waits.store(true, std::memory_order_relaxed);
    std::lock_guard work(shared->work);
    shared->loop_waits.store(false, std::memory_order_relaxed);
    if (shared->stopped()) return;
    working_on = self;  // compared, never followed: the loop may be gone once stopping
    for (int i = 0; i < ready; ++i) {
      const auto tag = events[i].data.u64;
      // Handlers report failures to the operations concerned; an exception escaping one is a
      // bug, but it must not take the process down with it.
      try {
        if (tag == kWakeTag)
          shared->run_commands();
        else if (tag < handlers->size())
          (*handlers)[tag]();
      } catch (const std::exception&) {
      }
      if (shared->stopped()) break;  // a handler stopped the loop: the loop may be gone
    }
    working_on = nullptr;
  }
}

}  // namespace memwire::detail::verbs
