#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace memwire::detail::verbs {

// The verbs transport's progress thread: one epoll over the completion channel, the rdma_cm
// event channel, the device's async events and a timer, plus an eventfd that wakes it for
// queued commands and for stopping. It sleeps in epoll_wait until something happens: no busy
// loop. Handlers and commands run under the loop's work (below), one thread at a time, so the
// state they touch needs no lock of its own.
//
// The work is the loop thread's for each batch of events it handles; while it sleeps, another
// thread may take it (try_take_work) and run handlers itself: a caller that begins a transfer
// posts its first request at once, and a thread waiting for a transfer reads the completions
// that end it (Engine::drive), instead of waking the loop's thread to do so and being woken by
// it in turn. The loop's thread, woken meanwhile, waits for the work to be given back.
class ProgressLoop {
 public:
  ProgressLoop();
  ~ProgressLoop();
  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  // Calls `on_readable` on the loop thread whenever `fd` is readable. Only before start().
  void watch(int fd, std::function<void()> on_readable);
  void start();
  // Joins the thread; commands still queued are dropped. Idempotent. On a thread that holds
  // the work (a handler's callback closing the connector), the loop's thread cannot be joined:
  // it ends once it gets the work back.
  void stop();
  bool stopping() const;

  // Runs `command` on the loop thread soon; false (and dropped) once stopping. Any thread.
  bool post(std::function<void()> command);
  bool on_loop_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

  // The right to run handlers and commands, released when it goes.
  class Work {
   public:
    Work() = default;
    Work(Work&& other) noexcept
        : loop_(std::exchange(other.loop_, nullptr)), outer_(other.outer_) {}
    Work& operator=(Work&&) = delete;
    ~Work();
    explicit operator bool() const noexcept { return loop_ != nullptr; }

   private:
    friend class ProgressLoop;
    Work(ProgressLoop* loop, const ProgressLoop* outer) : loop_(loop), outer_(outer) {}
    ProgressLoop* loop_ = nullptr;
    const ProgressLoop* outer_ = nullptr;  // the loop whose work this thread held before
  };
  // The work, taken at once if no thread runs this loop's handlers now and the loop's thread
  // does not wait for it; empty otherwise, and when this thread runs a loop's work already (a
  // handler's callback that begins or waits for another transfer: it must not nest, and the
  // work it would wait for is its own).
  Work try_take_work();
  // The work, once whoever holds it lets go (a waiter, after a round trip or two at most). Not
  // on a thread that holds this loop's work already.
  Work take_work();
  // Whether the calling thread runs a loop's handlers or commands now (any connector's).
  static bool runs_work_here() noexcept;
  // Whether it runs this loop's.
  bool holds_work() const noexcept;

  // With the work held: runs the commands queued so far.
  void run_commands();
  bool commands_queued() const;
  // With the work held: whether the loop's thread is woken when `fd` (watched) is readable. A
  // thread that takes the work and sleeps on `fd` itself turns it off meanwhile, so that one
  // event wakes one thread.
  void set_watched(int fd, bool watched);
  // Readable when commands are queued.
  int commands_fd() const noexcept;

 private:
  struct Shared;
  // The loop's thread; touches the loop itself (its handlers) only while not stopping.
  static void run(const std::shared_ptr<Shared>& shared,
                  const std::vector<std::function<void()>>* handlers, const ProgressLoop* self);

  // What the loop's thread uses: shared with it, so that a thread detached by stop() may still
  // look at it after the loop is gone.
  const std::shared_ptr<Shared> shared_;
  std::vector<std::function<void()>> handlers_;
  std::vector<int> watched_fds_;  // by handler index
  std::thread thread_;
};

}  // namespace memwire::detail::verbs
