// Workers: a connector and a channel together; publish (a lease), serve a prefix with a Python
// handler (a subscription), republish, read and request (the C++ Worker's, stopped by a cancel).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "channel.hpp"
#include "memwire/sideband/worker.hpp"

namespace memwire_python {
namespace {

// A C++ Worker with the connector and channel it borrows: whoever holds this (the Python
// Worker, each lease and subscription) keeps all three alive. Members end in reverse order:
// the worker before the channel and connector it uses.
struct WorkerHold {
  WorkerHold(std::shared_ptr<memwire::Connector> c, std::shared_ptr<memwire::sideband::Channel> ch)
      : connector(std::move(c)),
        channel(std::move(ch)),
        worker(std::make_unique<memwire::sideband::Worker>(*connector, *channel)) {}
  std::shared_ptr<memwire::Connector> connector;
  std::shared_ptr<memwire::sideband::Channel> channel;
  std::unique_ptr<memwire::sideband::Worker> worker;
};

class PySubscription {
 public:
  PySubscription(std::shared_ptr<memwire::sideband::Subscription> subscription,
                 std::shared_ptr<WorkerHold> worker)
      : worker_(std::move(worker)), subscription_(std::move(subscription)) {}
  ~PySubscription() { close(); }
  PySubscription(const PySubscription&) = delete;
  PySubscription& operator=(const PySubscription&) = delete;
  void close() {
    // Joins the serve threads, which may be inside the Python handler waiting for the GIL.
    end_native(subscription_, birth_);
    end_native(worker_, birth_);
  }

 private:
  ForkBirth birth_;
  std::shared_ptr<WorkerHold> worker_;  // the registration uses its worker and channel
  std::shared_ptr<memwire::sideband::Subscription> subscription_;
};

// A lease keeps its worker (and so the channel it withdraws from and the connector of its
// operation) and the Python owners of its memory until it ends: a lease collected after
// everything else a coroutine held still releases safely.
class PyLease {
 public:
  PyLease(memwire::sideband::Lease lease, std::shared_ptr<WorkerHold> worker, py::object owners)
      : worker_(std::move(worker)), lease_(std::move(lease)), owners_(std::move(owners)) {}
  ~PyLease() { close({}); }
  PyLease(const PyLease&) = delete;
  PyLease& operator=(const PyLease&) = delete;

  std::string name() { return checked().name(); }
  // Lease::close(reason), then lets go of what it kept alive.
  void close(const std::string& reason) {
    if (lease_ && !reason.empty()) closed_because_ = ": " + reason;
    if (lease_ && !birth_.inherited())
      without_gil([&] {
        lease_->close(reason);  // withdraws the name; a wait in another thread hears the reason
        return 0;
      });
    end_native(lease_, birth_);
    end_native(worker_, birth_);
    owners_ = py::none();
  }
  memwire::sideband::Lease& checked() {
    if (!lease_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "lease was closed");
    return *lease_;
  }
  // For waits: one that begins after close() ends as the ones in flight did.
  memwire::sideband::Lease& waitable() {
    if (!lease_)
      throw memwire::Error(memwire::ErrorCode::Cancelled, "the lease was closed" + closed_because_);
    return *lease_;
  }
  // The Python owners of the memory the lease now publishes (after a republish).
  void keep(py::object owners) { owners_ = std::move(owners); }
  void notify(py::object callable) {
    auto& op = waitable().operation();
    auto signal = std::make_shared<Signal>(std::move(callable));
    signals_.push_back(signal);
    without_gil([&] {
      op.on_complete([signal](memwire::OperationStatus status) { fire(*signal, status); });
      return 0;
    });
  }
  void notify_via(const std::shared_ptr<Notifier>& notifier, std::uint64_t token) {
    auto& op = waitable().operation();
    without_gil([&] {
      op.on_complete(
          [notifier, token](memwire::OperationStatus status) { notifier->post(token, status); });
      return 0;
    });
  }
  int status() { return static_cast<int>(checked().operation().status()); }
  int wait(std::int64_t timeout_ms) {
    auto& lease = waitable();
    return static_cast<int>(without_gil([&] { return lease.wait(milliseconds(timeout_ms)); }));
  }
  Metadata metadata() { return {checked().operation().metadata()}; }

 private:
  ForkBirth birth_;
  std::shared_ptr<WorkerHold> worker_;
  std::optional<memwire::sideband::Lease> lease_;
  std::string closed_because_;  // ": <the reason close() was given>"
  py::object owners_;
  std::vector<std::shared_ptr<Signal>> signals_;
};

class PyWorker {
 public:
  PyWorker(PyConnector& connector, PyChannel& channel)
      : worker_(std::make_shared<WorkerHold>(connector.shared(), channel.shared())),
        runner_(channel.runner()) {}
  ~PyWorker() {
    end_native(runner_, birth_);
    end_native(worker_, birth_);
  }
  PyWorker(const PyWorker&) = delete;
  PyWorker& operator=(const PyWorker&) = delete;

  memwire::sideband::Worker& get() { return *worker_->worker; }
  const std::shared_ptr<WorkerHold>& shared() const { return worker_; }
  memwire_python::CallRunner& runner() { return *runner_; }

 private:
  ForkBirth birth_;
  std::shared_ptr<WorkerHold> worker_;
  std::shared_ptr<memwire_python::CallRunner> runner_;  // its channel's
};

}  // namespace

void bind_workers(py::module_& m) {
  py::class_<PySubscription>(m, "Subscription").def("close", &PySubscription::close);

  py::class_<PyLease>(m, "Lease")
      .def_property_readonly("name", &PyLease::name)
      .def("close", &PyLease::close, py::arg("reason") = "")
      .def("notify", &PyLease::notify)
      .def("notify_via", &PyLease::notify_via)
      .def("status", &PyLease::status)
      .def("wait", &PyLease::wait)
      .def("metadata", &PyLease::metadata);

  py::class_<PyWorker>(m, "Worker")
      .def(py::init<PyConnector&, PyChannel&>())
      .def(
          "publish",
          [](PyWorker& w, const std::string& name, const Descriptors& local, std::int64_t ttl_ms,
             py::object owners) {
            const auto& descriptors = local;
            return new PyLease(without_gil([&] {
                                 return w.get().publish(name, descriptors, milliseconds(ttl_ms));
                               }),
                               w.shared(), std::move(owners));
          },
          py::arg("name"), py::arg("local"), py::arg("ttl_ms"), py::arg("owners") = py::none())
      .def("start_publish",
           [](PyWorker& w, std::string name, Descriptors local, std::int64_t ttl_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 w.runner(),
                 [worker = w.shared(), name, local = std::move(local),
                  ttl_ms](std::stop_token) mutable -> PyCall::Outcome {
                   return std::make_shared<memwire::sideband::Lease>(
                       worker->worker->publish(name, std::move(local), milliseconds(ttl_ms)));
                 },
                 std::move(notifier), token);
           })
      // Puts `local` under the lease's name in place of its memory (no moment of NotFound).
      .def("republish",
           [](PyWorker& w, PyLease& lease, const Descriptors& local, std::int64_t ttl_ms,
              py::object owners) {
             auto& held = lease.checked();
             const auto& descriptors = local;
             without_gil([&] {
               w.get().republish(held, descriptors, milliseconds(ttl_ms));
               return 0;
             });
             lease.keep(std::move(owners));
           })
      // The lease a start_publish call made, kept alive by `owners` from here on.
      .def("lease_of",
           [](PyWorker& w, PyCall& call, py::object owners) {
             auto [outcome, error] = call.take();
             if (error) std::rethrow_exception(error);
             auto* lease = std::get_if<std::shared_ptr<memwire::sideband::Lease>>(&outcome);
             if (lease == nullptr || !*lease)
               throw memwire::Error(memwire::ErrorCode::InvalidArgument, "not a publish call");
             return new PyLease(std::move(**lease), w.shared(), std::move(owners));
           })
      // handler(name) -> (list of NativeDescriptor, owner): runs on the channel's thread.
      // Registers on the channel's threads (a network round trip): the loop hears by
      // (notifier, token); subscription_of(call) then gives the Subscription.
      .def("start_serve",
           [](PyWorker& w, const std::string& prefix, py::function handler,
              std::int64_t write_timeout_ms, std::shared_ptr<Notifier> notifier,
              std::uint64_t token) {
             auto held = hold_python(std::move(handler));
             memwire::sideband::Worker::ServeOptions options;
             options.write_timeout = milliseconds(write_timeout_ms);
             auto serve_one = [held](const std::string& name) {
               if (!PythonGate::enter())
                 throw memwire::Error(memwire::ErrorCode::Cancelled, "interpreter shutting down");
               memwire::sideband::ServedData data;
               {
                 py::gil_scoped_acquire gil;
                 try {
                   auto* callable = static_cast<PyObject*>(const_cast<void*>(held.get()));
                   py::object result = py::reinterpret_borrow<py::object>(callable)(py::str(name));
                   auto pair = result.cast<py::tuple>();
                   data.descriptors = pair[0].cast<Descriptors>();
                   data.owner = hold_python(py::reinterpret_borrow<py::object>(pair[1]));
                 } catch (py::error_already_set& error) {
                   // A memwire error raised in Python keeps its code (MemwireError.code); anything
                   // else reaches the requester as NotFound with its text.
                   // Only the exception's kind and message travel: never its traceback (the owner's
                   // file paths and code).
                   int code = static_cast<int>(memwire::ErrorCode::NotFound);
                   py::object value = error.value();
                   std::string message =
                       py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>() +
                       ": " + py::str(value).cast<std::string>();
                   if (py::hasattr(value, "code") && PyLong_Check(value.attr("code").ptr())) {
                     const int raised = value.attr("code").cast<int>();
                     if (raised >= 0 && raised < static_cast<int>(memwire::kAllErrorCodes.size()))
                       code = raised;
                     message = py::str(value).cast<std::string>();
                   }
                   PythonGate::leave();
                   throw memwire::Error(static_cast<memwire::ErrorCode>(code), message);
                 } catch (const memwire::Error&) {
                   PythonGate::leave();
                   throw;
                 } catch (const std::exception& error) {
                   // The handler's result was not (descriptors, owner): never let it escape as a
                   // foreign exception on the channel's thread.
                   PythonGate::leave();
                   throw memwire::Error(
                       memwire::ErrorCode::InvalidArgument,
                       std::string("serve handler returned no descriptors: ") + error.what());
                 }
               }
               PythonGate::leave();
               return data;
             };
             return start_call(
                 w.runner(),
                 [worker = w.shared(), prefix, serve_one = std::move(serve_one),
                  options](std::stop_token) -> PyCall::Outcome {
                   return std::shared_ptr<memwire::sideband::Subscription>(
                       worker->worker->serve(prefix, serve_one, options));
                 },
                 std::move(notifier), token);
           })
      // Worker::read and Worker::request on the channel's threads: cancelling the call (the
      // awaiting task was cancelled) stops them, and they end only once nothing touches
      // `local`; the caller keeps `local`'s owners alive until the loop heard of the end.
      .def("start_read",
           [](PyWorker& w, std::string name, Descriptors local, std::int64_t timeout_ms, bool wait,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 w.runner(),
                 [worker = w.shared(), name, local = std::move(local), timeout_ms,
                  wait](std::stop_token stop) mutable -> PyCall::Outcome {
                   const auto lookup = wait ? memwire::sideband::Worker::Lookup::WaitUntilPublished
                                            : memwire::sideband::Worker::Lookup::Fetch;
                   return std::make_shared<AnyOperation>(worker->worker->read(
                       name, std::move(local), milliseconds(timeout_ms), lookup, stop));
                 },
                 std::move(notifier), token);
           })
      .def("start_request",
           [](PyWorker& w, std::string name, Descriptors local, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 w.runner(),
                 [worker = w.shared(), name, local = std::move(local),
                  timeout_ms](std::stop_token stop) mutable -> PyCall::Outcome {
                   return std::make_shared<AnyOperation>(worker->worker->request(
                       name, std::move(local), milliseconds(timeout_ms), stop));
                 },
                 std::move(notifier), token);
           })
      // The operation a start_read or start_request call ended with, its memory kept alive by
      // `owners` from here on.
      .def("operation_of",
           [](PyWorker& w, PyCall& call, py::object owners) {
             auto [outcome, error] = call.take();
             if (error) std::rethrow_exception(error);
             auto* op = std::get_if<std::shared_ptr<AnyOperation>>(&outcome);
             if (op == nullptr || !*op)
               throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                                    "not a read or request call");
             return new PyOperation(std::move(**op), w.shared()->connector, std::move(owners));
           })
      .def("subscription_of", [](PyWorker& w, PyCall& call) {
        auto [outcome, error] = call.take();
        if (error) std::rethrow_exception(error);
        auto* subscription =
            std::get_if<std::shared_ptr<memwire::sideband::Subscription>>(&outcome);
        if (subscription == nullptr || !*subscription)
          throw memwire::Error(memwire::ErrorCode::InvalidArgument, "not a serve call");
        return new PySubscription(std::move(*subscription), w.shared());
      });
}

}  // namespace memwire_python
