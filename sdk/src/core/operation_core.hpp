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

// What a waiting thread may drive itself instead of sleeping while a transport thread does:
// the one connection whose answer ends the operation. The waiter then takes the answer off the
// socket and is woken by it directly, one wake-up as a blocking recv has, where a transport
// thread would read it and wake the waiter: a second one, and a third runnable thread on a
// machine that may have two CPUs.
class WaitDriver {
 public:
  virtual ~WaitDriver() = default;
  // Reads, on the calling thread, until the answer to `request` has been handled and `settled`
  // is true, `until` passes, or something else needs the transport's thread (an answer to
  // another request, the connection closing). Until `spin_until` it looks again at once rather
  // than sleep. Returns false at once, having done nothing, when it cannot drive now (another
  // thread reads): then wait as usual.
  virtual bool drive(std::uint64_t request, const std::atomic<bool>& settled,
                     std::chrono::steady_clock::time_point spin_until,
                     std::chrono::steady_clock::time_point until) = 0;
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

  // Returns Complete; throws the failure, Error{Cancelled} (with its reason) or Error{Timeout}.
  // With a driver (below), first drives it for a short while; without one, or when another
  // thread drives it, spins briefly before it sleeps. Either way it looks at the operation (or the
  // socket) without sleeping for about as long as waits here typically last: a small operation
  // often ends within a network round trip, and waking a sleeping thread costs about as much again
  // (a halted vCPU's wake-up goes through the hypervisor).
  OperationStatus wait(std::chrono::milliseconds timeout) const;
  // A transport whose one request's answer ends this operation: waiters may read it themselves.
  // Completion callbacks may then run on the waiting thread (see Operation::on_complete).
  void drive_waits_with(std::weak_ptr<WaitDriver> driver, std::uint64_t request);
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

  // What the user's cancel(reason) does (an empty reason: the default wording), and what
  // dropping the last handle does.
  virtual void cancel(std::string reason) = 0;
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
  // Drives the driver, if any (see WaitDriver::drive): false when there is none to drive.
  bool drive(std::chrono::steady_clock::time_point spin_until,
             std::chrono::steady_clock::time_point until) const;
  // Spins until the operation settled or `until`.
  void spin(std::chrono::steady_clock::time_point until) const;

  const OperationKind kind_;
  mutable std::mutex mutex_;
  mutable std::condition_variable finished_;
  OperationStatus status_;
  std::optional<Error> error_;
  std::string transport_;
  std::vector<Callback> callbacks_;
  bool settling_ = false;  // final, but waiters wait for finish's `settle` and the callbacks
  // Final and settled: what wait() watches while it spins, set once the lock is free again.
  std::atomic<bool> settled_{false};
  Observation observation_;
  std::weak_ptr<WaitDriver> driver_;  // mutex_ held
  std::uint64_t driven_request_ = 0;
};

}  // namespace memwire::detail
