#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/status.hpp"

namespace memwire::detail {

// The state every operation shares: a status that moves forward once into a final state,
// a condition variable for waiters and callbacks for event loops.
class OperationCore {
 public:
  using Callback = std::function<void(OperationStatus)>;

  OperationCore(OperationKind kind, OperationStatus initial) : kind_(kind), status_(initial) {}
  virtual ~OperationCore() = default;
  OperationCore(const OperationCore&) = delete;
  OperationCore& operator=(const OperationCore&) = delete;

  OperationKind kind() const noexcept { return kind_; }
  OperationStatus status() const;
  std::string transport() const;
  std::string error_message() const;
  void set_transport(std::string name);

  // Returns Complete or Cancelled; throws the failure or Error{Timeout}.
  OperationStatus wait(std::optional<std::chrono::milliseconds> timeout) const;
  void on_complete(Callback callback);

  // Moves into a final state, once: the first caller wins and gets true. Runs callbacks on the
  // calling thread, outside the lock. `settle`, when given, runs first, with status() already
  // final (so transports stop) but waiters and callbacks not yet told: they hear of the end
  // only once it returns (e.g. once nothing touches the caller's memory any more).
  bool finish(OperationStatus status, std::optional<Error> error = std::nullopt,
              const std::function<void()>& settle = {});
  void mark_in_progress();
  // The error this operation ended with, if it errored.
  std::optional<Error> failure() const;

  // What the user's cancel() does, and what dropping the last handle does.
  virtual void cancel() = 0;
  virtual void abandon() = 0;

 protected:
  // Cancel rules shared by all operations: errored throws, finished changes nothing.
  // Returns true when the caller should go on to cancel.
  bool cancel_applies() const;

 private:
  const OperationKind kind_;
  mutable std::mutex mutex_;
  mutable std::condition_variable finished_;
  OperationStatus status_;
  std::optional<Error> error_;
  std::string transport_;
  std::vector<Callback> callbacks_;
  bool settling_ = false;  // final, but waiters and callbacks wait for finish's `settle`
};

}  // namespace memwire::detail
