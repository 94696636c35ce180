#include "transport/shm/second_cpu.hpp"

#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "util/thread_name.hpp"

namespace memwire::detail {
namespace {

// One thread, started on first use and parked between tasks for the process's life (never
// destroyed: nothing joins it at exit). A child of fork() has none of its parent's threads, so
// it starts its own.
struct Helper {
  std::mutex mutex;
  std::condition_variable wake, done;
  std::optional<WorkRef> task;
  std::uint64_t handed = 0, finished = 0;  // tasks; busy while they differ
  pid_t pid = ::getpid();

  Helper() {
    std::thread([this] {
      name_this_thread("memwire-copy");
      std::unique_lock lock(mutex);
      for (;;) {
        wake.wait(lock, [&] { return handed != finished; });
        lock.unlock();
        (*task)();
        lock.lock();
        ++finished;
        done.notify_all();
      }
    }).detach();
  }

  static Helper* of_this_process() {
    static std::mutex creating;
    static Helper* helper = nullptr;
    std::unique_lock lock(creating, std::try_to_lock);
    if (!lock) return nullptr;
    if (helper == nullptr || helper->pid != ::getpid()) {
      try {
        helper = new Helper();              // kept for good, see above
      } catch (const std::system_error&) {  // out of threads: no helper this time
        return nullptr;
      }
    }
    return helper;
  }
};

bool more_than_one_cpu() {
  static const bool more = std::thread::hardware_concurrency() > 1;
  return more;
}

}  // namespace

bool run_on_two_cpus(WorkRef first, WorkRef second) {
  if (!more_than_one_cpu()) return false;
  auto* helper = Helper::of_this_process();
  if (helper == nullptr) return false;
  std::unique_lock lock(helper->mutex, std::try_to_lock);
  if (!lock || helper->handed != helper->finished) return false;
  helper->task = second;
  const auto mine = ++helper->handed;
  lock.unlock();
  helper->wake.notify_one();
  struct WaitForHelper {
    Helper* helper;
    std::uint64_t mine;
    ~WaitForHelper() {
      std::unique_lock lock(helper->mutex);
      helper->done.wait(lock, [&] { return helper->finished >= mine; });
    }
  } wait_for_helper{helper, mine};
  first();
  return true;
}

}  // namespace memwire::detail
