#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/status.hpp"
#include "telemetry/event_log.hpp"
#include "telemetry/telemetry_recorder.hpp"

namespace memwire::detail {

// What telemetry and the log need to know about one operation.
struct Observation {
  std::shared_ptr<TelemetryRecorder> telemetry;  // null: not counted
  std::shared_ptr<const EventLog> events;        // null: not logged
  Side side = Side::Active;
  std::uint64_t bytes = 0;
  std::string key;         // the notification key, hex
  std::string peer;        // the remote connector, when known
  bool counts_end = true;  // false for a pool: its end is no operation's
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// The state every operation shares: a status that moves forward once into a final state,
// a condition variable for waiters and callbacks for event loops.
class OperationCore {
 public:
  using Callback = std::function<void(OperationStatus)>;

  OperationCore(OperationKind kind, OperationStatus initial)
      : kind_(kind), status_(initial), settled_(is_terminal(initial)) {}
  virtual ~OperationCore() = default;
  OperationCore(const OperationCore&) = delete;
  OperationCore& operator=(const OperationCore&) = delete;

  OperationKind kind() const noexcept { return kind_; }
  OperationStatus status() const;
  std::string transport() const;
  std::string error_message() const;
  void set_transport(std::string name);
  // Counted and logged when it ends. Set once, before the operation is shared with any thread.
  void observe(Observation observation) { observation_ = std::move(observation); }
  const Observation& observation() const noexcept { return observation_; }

  // Returns Complete or Cancelled; throws the failure or Error{Timeout}. Spins briefly before it
  // sleeps: a small operation often ends within a network round trip, and waking a sleeping
  // waiter from the transport's thread costs about as much again.
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
  // Counts the final status (under the lock, so that a waiter that sees it sees the counts).
  void record_end_locked() const noexcept;
  // Logs the final status; outside the lock, the sink may be slow.
  void log_end(OperationStatus status, const std::string& transport) const;

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
  // Final and settled: what wait() watches while it spins, set once the lock is free again.
  std::atomic<bool> settled_{false};
  Observation observation_;
};

}  // namespace memwire::detail
