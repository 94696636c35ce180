#pragma once

// A sideband channel as Python holds it, with the threads of its own that run its calls for an
// event loop (PyCall).
#include <exception>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "call_runner.hpp"
#include "completion.hpp"
#include "interpreter.hpp"
#include "memwire/sideband/channel.hpp"
#include "memwire/sideband/worker.hpp"
#include "operation.hpp"
#include "pool.hpp"

namespace memwire_python {

// One sideband call run by a CallRunner for an event loop: its outcome waits here, and the
// loop is woken through its Notifier (token); result() then hands it over (or raises).
class PyCall {
 public:
  using Outcome =
      std::variant<std::monostate, Metadata, PoolMeta, std::vector<std::string>,
                   std::shared_ptr<memwire::sideband::Lease>,
                   std::shared_ptr<memwire::sideband::Subscription>, std::shared_ptr<AnyOperation>>;

  PyCall() = default;
  // An outcome nobody took (the task was cancelled) ends without the GIL: a subscription joins
  // serve threads that may be waiting for it, a lease withdraws its name over the network.
  ~PyCall() {
    without_gil([&] {
      outcome_ = {};
      return 0;
    });
  }
  PyCall(const PyCall&) = delete;
  PyCall& operator=(const PyCall&) = delete;

  void cancel() { stop_.request_stop(); }
  const std::stop_source& stop() const { return stop_; }

  // On the runner's thread.
  void finish(Outcome outcome, std::exception_ptr error) noexcept {
    std::lock_guard lock(mutex_);
    outcome_ = std::move(outcome);
    error_ = std::move(error);
  }
  std::pair<Outcome, std::exception_ptr> take() {
    std::lock_guard lock(mutex_);
    return {std::exchange(outcome_, {}), std::exchange(error_, nullptr)};
  }

 private:
  std::stop_source stop_;
  std::mutex mutex_;
  Outcome outcome_;
  std::exception_ptr error_;
};

// Queues `work` (returning a PyCall::Outcome) on `runner`; the loop hears of its end by
// `notifier` (token). Returns the call, which cancel() stops.
template <class Work>
std::shared_ptr<PyCall> start_call(memwire_python::CallRunner& runner, Work work,
                                   std::shared_ptr<Notifier> notifier, std::uint64_t token) {
  auto call = std::make_shared<PyCall>();
  runner.submit(
      [call, work = std::move(work), notifier = std::move(notifier),
       token](std::stop_token stop) mutable {
        auto status = memwire::OperationStatus::Complete;
        try {
          call->finish(work(stop), nullptr);
        } catch (...) {
          call->finish({}, std::current_exception());
          status = memwire::OperationStatus::Errored;
        }
        notifier->post(token, status);
      },
      call->stop());
  return call;
}

// Holds a channel of either kind, shared with the workers that use it.
class PyChannel {
 public:
  PyChannel(std::shared_ptr<memwire::sideband::Channel> channel, std::size_t max_calls)
      : channel_(std::move(channel)),
        runner_(std::make_shared<memwire_python::CallRunner>(max_calls)) {}
  ~PyChannel() {
    end_native(runner_, birth_);  // stops and joins the calls in flight, which use the channel
    end_native(channel_, birth_);
  }
  PyChannel(const PyChannel&) = delete;
  PyChannel& operator=(const PyChannel&) = delete;
  memwire::sideband::Channel& get() { return *channel_; }
  const std::shared_ptr<memwire::sideband::Channel>& shared() const { return channel_; }
  const std::shared_ptr<memwire_python::CallRunner>& runner() const { return runner_; }

 private:
  ForkBirth birth_;
  std::shared_ptr<memwire::sideband::Channel> channel_;
  std::shared_ptr<memwire_python::CallRunner> runner_;
};

}  // namespace memwire_python
