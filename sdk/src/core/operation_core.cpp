#include "core/operation_core.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>

#include "memwire/error_codes.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace memwire::detail {

namespace {

// How long wait() spins before it sleeps on the condition variable: a little past how long
// waits typically last on this host, so that a small operation usually ends while its waiter
// still runs. Sleeping costs a futex wake from the reader thread and a scheduler round trip,
// which on a VM with paravirtual interrupts is 10-15 us of a 45 us 4 KiB READ (a quiet
// bare-metal-like VM: ~1 us of 12 us). Learned, as round trips differ by host, and bounded.
constexpr std::chrono::nanoseconds kMinWaitSpin{10'000};
constexpr std::chrono::nanoseconds kMaxWaitSpin{100'000};
// How long a waiter drives its operation's connection before it sleeps instead: a small
// operation's answer comes within a round trip (tens of microseconds). A longer one is a large
// transfer or a slow peer, which the transport's thread may as well read while the waiter
// sleeps, where a cancel from another thread wakes it (a waiter in poll(2) would not see one).
constexpr std::chrono::milliseconds kLongestDrive{2};
// Waits longer than this are large transfers or slow peers: they teach the spin nothing.
constexpr std::chrono::nanoseconds kLongestTypicalWait{1'000'000};

// Moving average of recent waits' lengths (ns), one per process: one host, one round trip.
// Relaxed: a lost update only drops a sample.
std::atomic<std::int64_t> typical_wait_ns{kMinWaitSpin.count()};

// Spinning waiters take a CPU each: at most one per two CPUs, so that the transport's threads,
// which end the operations, keep theirs. Others sleep at once.
std::atomic<unsigned> spinning_waiters{0};
const unsigned kMostSpinningWaiters = std::max(1u, std::thread::hardware_concurrency() / 2);

// Zero when waits here typically outlast the longest spin: spinning would only burn a CPU
// that the threads which end the operation (and other processes' I/O threads) need.
std::chrono::nanoseconds wait_spin() noexcept {
  const std::chrono::nanoseconds spin{typical_wait_ns.load(std::memory_order_relaxed) * 3 / 2};
  if (spin > kMaxWaitSpin) return std::chrono::nanoseconds(0);
  return std::max(spin, kMinWaitSpin);
}

void learn_wait(std::chrono::nanoseconds waited) noexcept {
  if (waited >= kLongestTypicalWait) return;
  const auto average = typical_wait_ns.load(std::memory_order_relaxed);
  typical_wait_ns.store(average + (waited.count() - average) / 16, std::memory_order_relaxed);
}

// The operations whose finish() runs on this thread now (settle and callbacks), innermost
// first: a wait for one of them from there has its answer (the operation is final), where
// waiting for the settling to end would wait for itself. A frame on finish()'s stack.
struct FinishingFrame {
  const void* operation;
  const FinishingFrame* outer;
};
thread_local const FinishingFrame* finishing_on_this_thread = nullptr;

bool finishing_here(const void* operation) noexcept {
  for (auto* frame = finishing_on_this_thread; frame != nullptr; frame = frame->outer)
    if (frame->operation == operation) return true;
  return false;
}

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

OperationStatus OperationCore::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

std::string OperationCore::transport() const {
  std::lock_guard lock(mutex_);
  return transport_;
}

void OperationCore::set_transport(std::string name) {
  std::lock_guard lock(mutex_);
  transport_ = std::move(name);
}

std::string OperationCore::error_message() const {
  std::lock_guard lock(mutex_);
  return error_ ? error_->what() : std::string();
}

std::optional<Error> OperationCore::failure() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void OperationCore::drive_waits_with(std::weak_ptr<WaitDriver> driver, std::uint64_t request) {
  std::lock_guard lock(mutex_);
  driver_ = std::move(driver);
  driven_request_ = request;
}

bool OperationCore::drive(std::chrono::steady_clock::time_point spin_until,
                          std::chrono::steady_clock::time_point until) const {
  std::shared_ptr<WaitDriver> driver;
  std::uint64_t request = 0;
  {
    std::lock_guard lock(mutex_);
    driver = driver_.lock();
    request = driven_request_;
  }
  return driver && driver->drive(request, settled_, spin_until, until);
}

void OperationCore::spin(std::chrono::steady_clock::time_point until) const {
  for (unsigned round = 1; !settled_.load(std::memory_order_acquire); ++round) {
    relax();
    if (round % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
  }
}

OperationStatus OperationCore::wait(std::chrono::milliseconds timeout) const {
  const auto entered = std::chrono::steady_clock::now();
  const auto deadline = entered + timeout;
  bool waited = false;
  // A callback (or settle) that asks for its own operation's end has it: final already.
  const bool from_own_finish = finishing_here(this);
  if (!settled_.load(std::memory_order_acquire) && !from_own_finish && timeout.count() > 0) {
    waited = true;
    // At most one spinning waiter per two CPUs: the threads that end operations (a peer's, or
    // this process's transport threads) keep theirs. Others sleep at once.
    const auto spin = wait_spin();
    const bool spins = spin.count() > 0 && spinning_waiters.fetch_add(
                                               1, std::memory_order_relaxed) < kMostSpinningWaiters;
    const auto spin_until = spins ? std::min(deadline, entered + spin) : entered;
    // A waiter that reads the socket itself spins on the socket, not on a transport thread of
    // this process: that one is not even woken meanwhile.
    if (!drive(spin_until, std::min(deadline, entered + kLongestDrive)) && spins)
      this->spin(spin_until);
    if (spin.count() > 0) spinning_waiters.fetch_sub(1, std::memory_order_relaxed);
  }
  std::unique_lock lock(mutex_);
  auto settled = [&] { return is_terminal(status_) && (!settling_ || from_own_finish); };
  if (!finished_.wait_until(lock, deadline, settled)) {
    if (!is_terminal(status_)) {
      throw Error(ErrorCode::Timeout, "operation not finished after " +
                                          std::to_string(timeout.count()) + " ms (status " +
                                          std::string(to_string(status_)) + ")");
    }
    // It ended; its callbacks, the end's last step, are running on memwire's thread. The
    // deadline bounds the transfer, not them: a thread a callback told of the end, asking
    // without waiting, gets the result rather than a Timeout with "status complete".
    finished_.wait(lock, settled);
  }
  if (waited) learn_wait(std::chrono::steady_clock::now() - entered);
  // A wait returns only what it waited for: a cancelled operation's wait throws, as an errored
  // one's does (status() tells the two apart).
  if (status_ == OperationStatus::Errored) throw *error_;
  if (status_ == OperationStatus::Cancelled)
    throw error_ ? *error_ : Error(ErrorCode::Cancelled, "the operation was cancelled");
  return status_;
}

void OperationCore::on_complete(Callback callback) {
  std::unique_lock lock(mutex_);
  if (!is_terminal(status_) || settling_) {
    callbacks_.push_back(std::move(callback));
    return;
  }
  auto status = status_;
  lock.unlock();
  callback(status);
}

namespace {}  // namespace

void OperationCore::record_end_locked() const noexcept {
  if (!observation_.telemetry || !observation_.counts_end) return;
  std::optional<ErrorCode> code;
  if (status_ == OperationStatus::Errored && error_) code = error_->code();
  observation_.telemetry->operation_ended(transport_, kind_, observation_.side, status_, code,
                                          observation_.bytes,
                                          std::chrono::steady_clock::now() - observation_.started);
}

void OperationCore::log_end(OperationStatus status, const std::string& transport) const {
  const bool errored = status == OperationStatus::Errored;
  const auto level = errored ? LogLevel::Warn : LogLevel::Debug;
  if (!observation_.events || !observation_.events->enabled(level)) return;
  std::string code, message;
  if (auto error = failure()) {
    if (errored || error->code() != ErrorCode::Cancelled)
      code = std::string(error_code_name(error->code()));
    message = error->what();
  }
  const char* event = errored                                ? "operation_failed"
                      : status == OperationStatus::Cancelled ? "operation_cancelled"
                                                             : "operation_complete";
  if (message.empty()) message = "operation complete";
  observation_.events->write(level, event, message,
                             LogFields()
                                 .peer(observation_.peer)
                                 .transport(transport)
                                 .key(observation_.key)
                                 .code(code)
                                 .kind(kind_ == OperationKind::Read ? "read" : "write")
                                 .side(observation_.side == Side::Active ? "active" : "passive")
                                 .bytes(observation_.bytes));
}

bool OperationCore::finish(OperationStatus status, std::optional<Error> error,
                           const std::function<void()>& settle) {
  std::string transport;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(status_)) return false;
    status_ = status;
    error_ = std::move(error);
    settling_ = true;  // until settle() and the callbacks ran: no wait returns before
    record_end_locked();
    transport = transport_;
  }
  log_end(status, transport);
  const FinishingFrame frame{this, finishing_on_this_thread};
  finishing_on_this_thread = &frame;
  // One that throws still lets the others run and the waiters go; the first is rethrown after.
  std::exception_ptr thrown;
  auto run = [&](const auto& work) {
    try {
      work();
    } catch (...) {
      if (!thrown) thrown = std::current_exception();
    }
  };
  if (settle) run(settle);
  // The callbacks run before any wait returns: a waiter may drop what they captured as soon as
  // its wait returns. One added meanwhile (even by a callback) runs in the next round.
  for (std::vector<Callback> callbacks;;) {
    {
      std::lock_guard lock(mutex_);
      if (callbacks_.empty()) {
        settling_ = false;
        break;
      }
      callbacks.swap(callbacks_);
    }
    for (auto& callback : callbacks) run([&] { callback(status); });
    callbacks.clear();
  }
  finishing_on_this_thread = frame.outer;
  settled_.store(true, std::memory_order_release);
  finished_.notify_all();
  if (thrown) std::rethrow_exception(thrown);
  return true;
}

void OperationCore::mark_in_progress() {
  std::lock_guard lock(mutex_);
  if (!is_terminal(status_)) status_ = OperationStatus::InProgress;
}

bool OperationCore::cancel_applies() const {
  std::lock_guard lock(mutex_);
  if (status_ == OperationStatus::Errored)
    throw Error(ErrorCode::InvalidArgument,
                "cannot cancel an errored operation (" + std::string(error_->what()) + ")");
  return !is_terminal(status_);
}

}  // namespace memwire::detail
