#include "transport/verbs/progress_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "memwire/error.hpp"
#include "util/thread_name.hpp"

namespace memwire::detail::verbs {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw Error(ErrorCode::Transport, what + ": " + std::strerror(errno));
}

// The wake-up eventfd's slot in handlers_ is marked by this index.
constexpr std::uint64_t kWakeTag = UINT64_MAX;

}  // namespace

ProgressLoop::ProgressLoop()
    : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_) throw_errno("epoll_create1");
  if (!wake_) throw_errno("eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &event) != 0) throw_errno("epoll_ctl");
}

ProgressLoop::~ProgressLoop() { stop(); }

void ProgressLoop::watch(int fd, std::function<void()> on_readable) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = handlers_.size();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) throw_errno("epoll_ctl");
  handlers_.push_back(std::move(on_readable));
}

void ProgressLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void ProgressLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) {
    // Stopping from a handler (e.g. a completion callback dropping the last connector handle)
    // cannot join itself; the thread sees stopping_ as soon as that handler returns.
    if (on_loop_thread())
      thread_.detach();
    else
      thread_.join();
  }
  std::lock_guard lock(mutex_);
  commands_.clear();
}

bool ProgressLoop::post(std::function<void()> command) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    commands_.push_back(std::move(command));
  }
  const std::uint64_t one = 1;
  // An eventfd write only fails when the counter would overflow: it is then readable anyway.
  [[maybe_unused]] auto written = ::write(wake_.get(), &one, sizeof one);
  return true;
}

void ProgressLoop::run_commands() {
  std::uint64_t count = 0;
  [[maybe_unused]] auto drained = ::read(wake_.get(), &count, sizeof count);
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lock(mutex_);
    batch.swap(commands_);
  }
  for (auto& command : batch) command();
}

namespace {
thread_local bool this_is_a_progress_thread = false;
}  // namespace

bool ProgressLoop::on_a_progress_thread() noexcept { return this_is_a_progress_thread; }

void ProgressLoop::run() {
  name_this_thread("memwire-verbs");
  this_is_a_progress_thread = true;
  epoll_event events[16];
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    const int ready = ::epoll_wait(epoll_.get(), events, 16, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;  // only on a broken epoll fd: nothing sensible is left to do
    }
    for (int i = 0; i < ready; ++i) {
      const auto tag = events[i].data.u64;
      // Handlers report failures to the operations concerned; an exception escaping one is a
      // bug, but it must not take the process down with it.
      try {
        if (tag == kWakeTag)
          run_commands();
        else if (tag < handlers_.size())
          handlers_[tag]();
      } catch (const std::exception&) {
      }
    }
  }
}

}  // namespace memwire::detail::verbs
