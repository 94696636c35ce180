#pragma once

// Threads of the Python package's own for the sideband's blocking calls (lookups, publish,
// request), so that async Python never lends them asyncio's default executor: a call waiting
// for a name holds one of these threads, never the application's. Each call gets a stop token;
// cancelling it (the awaiting task was cancelled) ends a wait early. At most `max_threads`
// calls run at once; more wait in a queue, in order.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

namespace memwire_python {

class CallRunner {
 public:
  // Runs on one of the runner's threads; must not throw (it reports its own outcome).
  using Work = std::function<void(std::stop_token)>;

  explicit CallRunner(std::size_t max_threads) : max_threads_(max_threads == 0 ? 1 : max_threads) {}
  ~CallRunner() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (auto& job : queue_) job.stop.request_stop();
      for (auto* stop : running_) stop->request_stop();
    }
    wake_.notify_all();
    for (auto& thread : threads_) thread.join();
  }
  CallRunner(const CallRunner&) = delete;
  CallRunner& operator=(const CallRunner&) = delete;

  // Queues `work`; `stop` is the call's own (its owner requests a stop to cancel it).
  void submit(Work work, std::stop_source stop) {
    std::lock_guard lock(mutex_);
    if (stopping_) stop.request_stop();
    queue_.push_back(Job{std::move(work), std::move(stop)});
    // Idle threads already woken for earlier jobs still count as idle until they take one:
    // compare with the jobs not yet taken, or a new job could wait behind a long call.
    if (queue_.size() > idle_ && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { run(); });
    } else {
      wake_.notify_one();
    }
  }

 private:
  struct Job {
    Work work;
    std::stop_source stop;
  };

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping, nothing left
      Job job = std::move(queue_.front());
      queue_.pop_front();
      auto running = running_.insert(running_.end(), &job.stop);
      lock.unlock();
      job.work(job.stop.get_token());
      lock.lock();
      running_.erase(running);
    }
  }

  const std::size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  std::list<std::stop_source*> running_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace memwire_python
