#pragma once

// One-shot operations as Python holds them: the operation with the connector and the Python
// owners of its memory, and the descriptors and metadata they are made of.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "completion.hpp"
#include "interpreter.hpp"
#include "memwire/memwire.hpp"

namespace memwire_python {

// Python's Descriptor holds one of these (made once), so that starting an operation converts
// no strings and parses no devices.
using Descriptors = std::vector<memwire::Descriptor>;

struct Metadata {
  memwire::RdmaMetadata value;
};

using AnyOperation =
    std::variant<memwire::ReadableOperation, memwire::WritableOperation, memwire::ReadOperation,
                 memwire::WriteOperation, memwire::BlockTransfer>;

// Holds what the operation uses, whatever order Python drops things in: the connector (its
// progress thread and transports) and the Python objects that own the memory (`owners`, the
// Descriptor list), released only after the operation let go of that memory.
class PyOperation {
 public:
  PyOperation(AnyOperation op, std::shared_ptr<memwire::Connector> connector, py::object owners)
      : op_(std::make_unique<AnyOperation>(std::move(op))),
        connector_(std::move(connector)),
        owners_(std::move(owners)) {}
  ~PyOperation() {
    // Dropping an unfinished operation cancels it and may wait for a transport to let go of
    // the memory (bounded by connect_timeout), and the last connector reference joins its
    // threads: not with the GIL held.
    end_native(op_, birth_);
    end_native(connector_, birth_);
    for (auto& signal : signals_) {
      if (PyObject* callable = signal->take()) Py_DECREF(callable);
    }
  }
  PyOperation(const PyOperation&) = delete;
  PyOperation& operator=(const PyOperation&) = delete;

  memwire::Operation& base() {
    if (!op_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "operation was closed");
    return std::visit([](auto& op) -> memwire::Operation& { return op; }, *op_);
  }

  // Holds the GIL: status() takes the operation's lock only briefly, and no thread that holds
  // that lock ever waits for the GIL (completions reach Python through a Notifier).
  int status() { return static_cast<int>(base().status()); }
  int kind() { return static_cast<int>(base().kind()); }

  // Calls `callable(status)` once the operation ends (at once when it has).
  void notify(py::object callable) {
    auto& op = base();
    auto signal = std::make_shared<Signal>(std::move(callable));
    signals_.push_back(signal);
    if (signals_.size() > 64) prune_signals();
    without_gil([&] {
      op.on_complete([signal](memwire::OperationStatus status) { fire(*signal, status); });
      return 0;
    });
  }

  // Posts (token, final status) to `notifier` once the operation ends.
  void notify_via(const std::shared_ptr<Notifier>& notifier, std::uint64_t token) {
    auto& op = base();
    without_gil([&] {
      op.on_complete(
          [notifier, token](memwire::OperationStatus status) { notifier->post(token, status); });
      return 0;
    });
  }

  // Watches the status for at most `budget_us` (GIL released, yielding the CPU between looks):
  // the final status, or -1 when still running. A small transfer ends sooner than the event
  // loop's wake-up (eventfd, epoll, callback, task step) would take.
  int spin(std::int64_t budget_us) {
    auto& op = base();
    return without_gil([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
      for (;;) {
        const auto status = op.status();
        if (status == memwire::OperationStatus::Complete ||
            status == memwire::OperationStatus::Cancelled ||
            status == memwire::OperationStatus::Errored)
          return static_cast<int>(status);
        if (std::chrono::steady_clock::now() >= deadline) return -1;
        std::this_thread::yield();
      }
    });
  }

  // Blocking wait (GIL released): COMPLETE, or raises why not (a cancel included).
  int wait(std::int64_t timeout_ms) {
    auto& op = base();
    return static_cast<int>(
        without_gil([&] { return op.wait_for_completion(milliseconds(timeout_ms)); }));
  }

  // Operation::cancel(reason): a block transfer's owner hears `reason` too.
  void cancel(const std::string& reason) {
    auto& op = base();
    without_gil([&] {
      op.cancel(reason);
      return 0;
    });
  }

  // Ends the operation now (cancels an unfinished one; a passive one's access is revoked).
  void close() {
    end_native(op_, birth_);
    end_native(connector_, birth_);
    owners_ = py::none();
  }

  std::string transport() { return base().transport(); }
  std::string error_message() { return base().error_message(); }

  Metadata metadata() {
    auto& any = *checked();
    if (auto* readable = std::get_if<memwire::ReadableOperation>(&any))
      return {readable->metadata()};
    if (auto* writable = std::get_if<memwire::WritableOperation>(&any))
      return {writable->metadata()};
    throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                         "metadata() belongs to readable and writable operations");
  }

  Metadata renew(std::int64_t lifetime_ms) {
    auto& any = *checked();
    return without_gil([&]() -> Metadata {
      if (auto* readable = std::get_if<memwire::ReadableOperation>(&any))
        return {readable->renew(milliseconds(lifetime_ms))};
      if (auto* writable = std::get_if<memwire::WritableOperation>(&any))
        return {writable->renew(milliseconds(lifetime_ms))};
      throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                           "renew() belongs to readable and writable operations");
    });
  }

  // Raises unless the read completed (memwire's rule: results only once complete).
  void check_results() {
    auto* read = std::get_if<memwire::ReadOperation>(checked());
    if (read == nullptr)
      throw memwire::Error(memwire::ErrorCode::InvalidArgument, "results() belongs to reads");
    (void)read->results();
  }

 private:
  AnyOperation* checked() {
    if (!op_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "operation was closed");
    return op_.get();
  }
  // Drops signals that already fired, so that many waits on one operation stay bounded.
  void prune_signals() {
    std::erase_if(signals_, [](const std::shared_ptr<Signal>& s) { return s->fired(); });
  }

  ForkBirth birth_;
  std::unique_ptr<AnyOperation> op_;
  std::shared_ptr<memwire::Connector> connector_;
  py::object owners_;
  std::vector<std::shared_ptr<Signal>> signals_;
};

}  // namespace memwire_python
