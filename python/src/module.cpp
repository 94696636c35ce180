// memwire._memwire: the native half of the Python package. Thin over the C++ API; the
// nixl_connect-shaped surface (async operations, Descriptor, enums) is Python (memwire/*.py).
//
// Threads and the GIL:
// - Every call into memwire that may block or take a lock runs with the GIL released, so a
//   memwire thread that needs the GIL (a completion callback) never waits on one that holds it.
// - Completion reaches Python through Operation::on_complete: the callback, on whatever thread
//   finishes the operation, takes the GIL and calls a Python callable (which hands the status
//   to the event loop with call_soon_threadsafe). Once the interpreter starts shutting down
//   (atexit), callbacks no longer touch Python at all: see PythonGate.
// - A Python object held by a C++ callback is always released with the GIL held: Signal hands
//   it over exactly once, either to the callback or to the owning wrapper's destructor.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "memwire/memwire.hpp"
#include "memwire/sideband/http.hpp"
#include "memwire/sideband/nats.hpp"
#include "memwire/sideband/worker.hpp"

namespace py = pybind11;
using std::chrono::milliseconds;

namespace {

// --- Interpreter lifetime -------------------------------------------------------------------

// Whether C++ threads may still enter Python. Closed from an atexit hook: after it, callbacks
// drop their work instead of taking the GIL (which would hang or kill the thread while the
// interpreter finalizes).
class PythonGate {
 public:
  // True when the caller may take the GIL; it must call leave() afterwards.
  static bool enter() noexcept {
    entering_.fetch_add(1);
    if (!open_.load()) {
      leave();
      return false;
    }
    return true;
  }
  static void leave() noexcept {
    if (entering_.fetch_sub(1) == 1 && !open_.load()) {
      std::lock_guard lock(mutex_);
      left_.notify_all();
    }
  }

  // Called with the GIL held, from atexit: closes the gate and lets callbacks that already
  // entered finish (they need the GIL, so it is released while waiting). Bounded: 5 s.
  static void close() {
    open_.store(false);
    py::gil_scoped_release release;
    std::unique_lock lock(mutex_);
    left_.wait_for(lock, std::chrono::seconds(5), [] { return entering_.load() == 0; });
  }
  static bool open() noexcept { return open_.load(); }

 private:
  static inline std::atomic<bool> open_{true};
  static inline std::atomic<int> entering_{0};
  static inline std::mutex mutex_;
  static inline std::condition_variable left_;
};

// Releases the GIL only where this thread holds it (a callback may run on a memwire thread).
template <class F>
auto without_gil(F&& work) {
  if (PyGILState_Check()) {
    py::gil_scoped_release release;
    return work();
  }
  return work();
}

// --- Errors ---------------------------------------------------------------------------------

// memwire.errors.by_code: ErrorCode value -> exception class. A new reference, kept for the
// process's life (never released, so no destructor runs after the interpreter is gone).
PyObject* error_classes = nullptr;

PyObject* error_class(memwire::ErrorCode code) {
  if (error_classes == nullptr) {
    auto module = py::module_::import("memwire.errors");
    error_classes = module.attr("by_code").ptr();
    Py_INCREF(error_classes);
  }
  PyObject* key = PyLong_FromLong(static_cast<long>(code));
  PyObject* found = PyDict_GetItem(error_classes, key);  // borrowed
  Py_DECREF(key);
  return found != nullptr ? found : PyExc_RuntimeError;
}

void raise_error(const memwire::Error& error) {
  PyErr_SetString(error_class(error.code()), error.what());
}

// --- Buffers --------------------------------------------------------------------------------

// A Python buffer export (numpy array, bytearray, memoryview, ...), held while a Descriptor
// needs its memory: while it lives, a bytearray cannot be resized and numpy keeps the array.
class BufferHold {
 public:
  BufferHold(py::handle object, bool writable) {
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) throw py::error_already_set();
    held_ = true;
  }
  ~BufferHold() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferHold(const BufferHold&) = delete;
  BufferHold& operator=(const BufferHold&) = delete;

  std::uintptr_t address() const { return reinterpret_cast<std::uintptr_t>(view_.buf); }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }
  bool readonly() const { return view_.readonly != 0; }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// --- Descriptors and metadata ---------------------------------------------------------------

// Python's Descriptor holds one of these (made once), so that starting an operation converts
// no strings and parses no devices.
using Descriptors = std::vector<memwire::Descriptor>;

struct Metadata {
  memwire::RdmaMetadata value;
};

Metadata parse_metadata(const std::string& json) {
  return {memwire::RdmaMetadata::from_json(json)};
}

py::dict metadata_fields(const memwire::RdmaMetadata& metadata) {
  py::list descriptors;
  for (const auto& d : metadata.descriptors()) {
    py::dict item;
    item["device"] = d.device.to_string();
    item["ptr"] = d.ptr;
    item["size"] = d.size;
    descriptors.append(item);
  }
  py::list transports;
  for (const auto& t : metadata.endpoint().transports) transports.append(t.name);
  py::dict fields;
  fields["descriptors"] = descriptors;
  fields["notification_key"] = metadata.notification_key();
  fields["operation_kind"] = static_cast<int>(metadata.operation_kind());
  fields["connector"] = metadata.endpoint().connector;
  fields["host"] = metadata.endpoint().host;
  fields["transports"] = transports;
  fields["expires_at_ms"] = metadata.expires_at_ms();
  return fields;
}

// --- Completion signals ---------------------------------------------------------------------

// A Python callable waiting for an operation's end. Armed with the GIL held; taken exactly once.
class Signal {
 public:
  explicit Signal(py::object callable) : callable_(callable.release().ptr()) {}
  PyObject* take() noexcept {
    std::lock_guard lock(mutex_);
    return std::exchange(callable_, nullptr);
  }
  bool fired() noexcept {
    std::lock_guard lock(mutex_);
    return callable_ == nullptr;
  }

 private:
  std::mutex mutex_;
  PyObject* callable_;
};

// Runs on the thread that finished the operation, with or without the GIL.
void fire(Signal& signal, memwire::OperationStatus status) noexcept {
  if (!PythonGate::enter()) return;  // shutting down: the callable is left to the process's end
  if (PyObject* callable = signal.take()) {
    PyGILState_STATE state = PyGILState_Ensure();
    PyObject* result = PyObject_CallFunction(callable, "i", static_cast<int>(status));
    if (result == nullptr) {
      PyErr_WriteUnraisable(callable);
    } else {
      Py_DECREF(result);
    }
    Py_DECREF(callable);
    PyGILState_Release(state);
  }
  PythonGate::leave();
}

// Completions for one asyncio loop, without the GIL: memwire's thread appends (token, status)
// and makes an eventfd readable; the loop (add_reader) drains them and resolves its futures. No
// Python object crosses to memwire's threads, and none of them ever waits for the GIL.
class Notifier {
 public:
  Notifier() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw memwire::Error(memwire::ErrorCode::Transport, "eventfd failed");
  }
  ~Notifier() { ::close(fd_); }
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  int fd() const noexcept { return fd_; }

  void post(std::uint64_t token, memwire::OperationStatus status) noexcept {
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      wake = ready_.empty();  // one wake-up per batch: the drain takes everything queued
      ready_.emplace_back(token, static_cast<int>(status));
    }
    if (wake) {
      const std::uint64_t one = 1;
      if (::write(fd_, &one, sizeof one) < 0) {
        // EAGAIN only when the counter is full, i.e. already readable: the loop will drain.
      }
    }
  }

  std::vector<std::pair<std::uint64_t, int>> drain() {
    std::uint64_t count = 0;
    if (::read(fd_, &count, sizeof count) < 0) {
      // EAGAIN: nothing signalled since the last drain; take what is queued anyway.
    }
    std::vector<std::pair<std::uint64_t, int>> out;
    std::lock_guard lock(mutex_);
    out.swap(ready_);
    return out;
  }

 private:
  int fd_;
  std::mutex mutex_;
  std::vector<std::pair<std::uint64_t, int>> ready_;
};

// --- Operations -----------------------------------------------------------------------------

using AnyOperation = std::variant<memwire::ReadableOperation, memwire::WritableOperation,
                                  memwire::ReadOperation, memwire::WriteOperation>;

class PyOperation {
 public:
  explicit PyOperation(AnyOperation op) : op_(std::make_unique<AnyOperation>(std::move(op))) {}
  ~PyOperation() {
    // Dropping an unfinished operation cancels it and may wait for a transport to let go of
    // the memory (bounded by connect_timeout): not with the GIL held.
    without_gil([&] {
      op_.reset();
      return 0;
    });
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

  // Blocking wait (GIL released); raises the failure. timeout_ms < 0: none.
  int wait(std::int64_t timeout_ms) {
    auto& op = base();
    return static_cast<int>(without_gil([&] {
      return timeout_ms < 0 ? op.wait_for_completion()
                            : op.wait_for_completion(milliseconds(timeout_ms));
    }));
  }

  void cancel() {
    auto& op = base();
    without_gil([&] {
      op.cancel();
      return 0;
    });
  }

  // Ends the operation now (cancels an unfinished one; a passive one's access is revoked).
  void close() {
    without_gil([&] {
      op_.reset();
      return 0;
    });
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

  std::unique_ptr<AnyOperation> op_;
  std::vector<std::shared_ptr<Signal>> signals_;
};

// --- Connector ------------------------------------------------------------------------------

struct ConnectorConfig {
  std::string name;
  std::string bind_address;
  int port = 0;
  std::vector<std::string> transports;
  std::int64_t metadata_ttl_ms = -1;
  std::int64_t connect_timeout_ms = -1;
  bool from_environment = true;
};

class PyConnector {
 public:
  explicit PyConnector(const ConnectorConfig& config) {
    memwire::ConnectorOptions options;
    if (config.from_environment) options = memwire::ConnectorOptions::from_environment();
    if (!config.name.empty()) options.name = config.name;
    if (!config.bind_address.empty()) options.bind_address = config.bind_address;
    if (config.port < 0 || config.port > 65535)
      throw memwire::Error(memwire::ErrorCode::InvalidArgument, "port must be 0..65535");
    if (config.port != 0) options.port = static_cast<std::uint16_t>(config.port);
    if (!config.transports.empty()) options.transports = config.transports;
    if (config.metadata_ttl_ms >= 0) options.metadata_ttl = milliseconds(config.metadata_ttl_ms);
    if (config.connect_timeout_ms > 0)
      options.connect_timeout = milliseconds(config.connect_timeout_ms);
    connector_ = without_gil([&] { return std::make_shared<memwire::Connector>(options); });
  }
  ~PyConnector() {
    without_gil([&] {
      connector_.reset();
      return 0;
    });
  }
  PyConnector(const PyConnector&) = delete;
  PyConnector& operator=(const PyConnector&) = delete;

  memwire::Connector& get() { return *connector_; }
  const std::shared_ptr<memwire::Connector>& shared() const { return connector_; }

 private:
  std::shared_ptr<memwire::Connector> connector_;
};

// --- Sideband -------------------------------------------------------------------------------

// Holds a channel of either kind; the Worker borrows it (both outlive the worker: the Python
// Worker keeps references to its connector and channel).
class PyChannel {
 public:
  explicit PyChannel(std::unique_ptr<memwire::sideband::Channel> channel)
      : channel_(std::move(channel)) {}
  ~PyChannel() {
    without_gil([&] {
      channel_.reset();
      return 0;
    });
  }
  PyChannel(const PyChannel&) = delete;
  PyChannel& operator=(const PyChannel&) = delete;
  memwire::sideband::Channel& get() { return *channel_; }

 private:
  std::unique_ptr<memwire::sideband::Channel> channel_;
};

class PyStopSource {
 public:
  void request_stop() { source_.request_stop(); }
  std::stop_token token() const { return source_.get_token(); }

 private:
  std::stop_source source_;
};

class PySubscription {
 public:
  explicit PySubscription(std::unique_ptr<memwire::sideband::Subscription> subscription)
      : subscription_(std::move(subscription)) {}
  ~PySubscription() { close(); }
  PySubscription(const PySubscription&) = delete;
  PySubscription& operator=(const PySubscription&) = delete;
  void close() {
    // Joins the serve threads, which may be inside the Python handler waiting for the GIL.
    without_gil([&] {
      subscription_.reset();
      return 0;
    });
  }

 private:
  std::unique_ptr<memwire::sideband::Subscription> subscription_;
};

// A Python object kept alive by C++ (ServedData::owner): released with the GIL, or leaked when
// the interpreter is already shutting down.
std::shared_ptr<const void> hold_python(py::object object) {
  PyObject* raw = object.release().ptr();
  return std::shared_ptr<const void>(raw, [](const void* p) {
    auto* held = static_cast<PyObject*>(const_cast<void*>(p));
    if (!PythonGate::enter()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(held);
    PyGILState_Release(state);
    PythonGate::leave();
  });
}

class PyLease {
 public:
  explicit PyLease(memwire::sideband::Lease lease) : lease_(std::move(lease)) {}
  ~PyLease() { release(); }
  PyLease(const PyLease&) = delete;
  PyLease& operator=(const PyLease&) = delete;

  std::string name() { return checked().name(); }
  void release() {
    without_gil([&] {
      if (lease_) lease_->release();
      lease_.reset();
      return 0;
    });
  }
  memwire::sideband::Lease& checked() {
    if (!lease_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "lease was released");
    return *lease_;
  }
  void notify(py::object callable) {
    auto signal = std::make_shared<Signal>(std::move(callable));
    signals_.push_back(signal);
    auto& op = checked().operation();
    without_gil([&] {
      op.on_complete([signal](memwire::OperationStatus status) { fire(*signal, status); });
      return 0;
    });
  }
  void notify_via(const std::shared_ptr<Notifier>& notifier, std::uint64_t token) {
    auto& op = checked().operation();
    without_gil([&] {
      op.on_complete(
          [notifier, token](memwire::OperationStatus status) { notifier->post(token, status); });
      return 0;
    });
  }
  int status() { return static_cast<int>(checked().operation().status()); }
  int wait(std::int64_t timeout_ms) {
    auto& lease = checked();
    return static_cast<int>(without_gil([&] { return lease.wait(milliseconds(timeout_ms)); }));
  }
  Metadata metadata() { return {checked().operation().metadata()}; }

 private:
  std::optional<memwire::sideband::Lease> lease_;
  std::vector<std::shared_ptr<Signal>> signals_;
};

class PyWorker {
 public:
  PyWorker(PyConnector& connector, PyChannel& channel)
      : worker_(std::make_unique<memwire::sideband::Worker>(connector.get(), channel.get())) {}
  ~PyWorker() {
    without_gil([&] {
      worker_.reset();
      return 0;
    });
  }
  PyWorker(const PyWorker&) = delete;
  PyWorker& operator=(const PyWorker&) = delete;

  memwire::sideband::Worker& get() { return *worker_; }

 private:
  std::unique_ptr<memwire::sideband::Worker> worker_;
};

}  // namespace

PYBIND11_MODULE(_memwire, m) {
  m.doc() = "memwire's native core; use the `memwire` package";

  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const memwire::Error& e) {
      raise_error(e);
    }
  });

  // Closed from memwire/__init__.py's atexit hook, before finalization begins.
  m.def("_close_python_gate", [] { PythonGate::close(); });
  m.def("_python_gate_open", [] { return PythonGate::open(); });

  m.def(
      "parse_device",
      [](const std::string& text) {
        auto device = memwire::Device::parse(text);
        return std::make_pair(static_cast<int>(device.kind()), device.id());
      },
      "(kind, id) of a device string: cpu/host, cuda[:N]/gpu[:N]");
  m.def("error_code_name", [](int code) {
    return std::string(memwire::to_string(static_cast<memwire::ErrorCode>(code)));
  });

  py::class_<memwire::Descriptor>(m, "NativeDescriptor")
      .def(py::init([](std::uintptr_t ptr, std::size_t size, const std::string& device) {
        return memwire::Descriptor(reinterpret_cast<void*>(ptr), size,
                                   memwire::Device::parse(device));
      }))
      .def_property_readonly(
          "ptr",
          [](const memwire::Descriptor& d) { return reinterpret_cast<std::uintptr_t>(d.ptr()); })
      .def_property_readonly("size", &memwire::Descriptor::size);

  py::class_<BufferHold>(m, "BufferHold")
      .def(py::init<py::handle, bool>(), py::arg("object"), py::arg("writable"))
      .def_property_readonly("address", &BufferHold::address)
      .def_property_readonly("size", &BufferHold::size)
      .def_property_readonly("readonly", &BufferHold::readonly);

  py::class_<Metadata>(m, "Metadata")
      .def_static("from_json", &parse_metadata)
      .def("to_json", [](const Metadata& self) { return self.value.to_json(); })
      .def("fields", [](const Metadata& self) { return metadata_fields(self.value); })
      .def("__eq__", [](const Metadata& a, const Metadata& b) { return a.value == b.value; });

  py::class_<ConnectorConfig>(m, "ConnectorConfig")
      .def(py::init<>())
      .def_readwrite("name", &ConnectorConfig::name)
      .def_readwrite("bind_address", &ConnectorConfig::bind_address)
      .def_readwrite("port", &ConnectorConfig::port)
      .def_readwrite("transports", &ConnectorConfig::transports)
      .def_readwrite("metadata_ttl_ms", &ConnectorConfig::metadata_ttl_ms)
      .def_readwrite("connect_timeout_ms", &ConnectorConfig::connect_timeout_ms)
      .def_readwrite("from_environment", &ConnectorConfig::from_environment);

  py::class_<PyOperation>(m, "Operation")
      .def("status", &PyOperation::status)
      .def("kind", &PyOperation::kind)
      .def("notify", &PyOperation::notify)
      .def("notify_via", &PyOperation::notify_via)
      .def("wait", &PyOperation::wait)
      .def("cancel", &PyOperation::cancel)
      .def("close", &PyOperation::close)
      .def("transport", &PyOperation::transport)
      .def("error_message", &PyOperation::error_message)
      .def("metadata", &PyOperation::metadata)
      .def("renew", &PyOperation::renew)
      .def("check_results", &PyOperation::check_results);

  py::class_<Notifier, std::shared_ptr<Notifier>>(m, "Notifier")
      .def(py::init<>())
      .def_property_readonly("fd", &Notifier::fd)
      .def("drain", &Notifier::drain);

  py::class_<PyConnector>(m, "Connector")
      .def(py::init<const ConnectorConfig&>())
      .def_property_readonly("name", [](PyConnector& c) { return c.get().name(); })
      .def_property_readonly("hostname", [](PyConnector& c) { return c.get().hostname(); })
      .def("transports", [](PyConnector& c) { return c.get().transports(); })
      .def("create_readable",
           [](PyConnector& c, const Descriptors& local) {
             const auto& descriptors = local;
             return new PyOperation(
                 without_gil([&] { return AnyOperation(c.get().create_readable(descriptors)); }));
           })
      .def("create_writable",
           [](PyConnector& c, const Descriptors& local) {
             const auto& descriptors = local;
             return new PyOperation(
                 without_gil([&] { return AnyOperation(c.get().create_writable(descriptors)); }));
           })
      // begin_* take an optional callable so that the completion is armed in the same call.
      .def(
          "begin_read",
          [](PyConnector& c, const Metadata& remote, const Descriptors& local,
             std::shared_ptr<Notifier> notifier, std::uint64_t token) {
            const auto& descriptors = local;
            auto* op = new PyOperation(without_gil(
                [&] { return AnyOperation(c.get().begin_read(remote.value, descriptors)); }));
            if (notifier) op->notify_via(notifier, token);
            return op;
          },
          py::arg("remote"), py::arg("local"), py::arg("notifier") = nullptr, py::arg("token") = 0)
      .def(
          "begin_write",
          [](PyConnector& c, const Descriptors& local, const Metadata& remote,
             std::shared_ptr<Notifier> notifier, std::uint64_t token) {
            const auto& descriptors = local;
            auto* op = new PyOperation(without_gil(
                [&] { return AnyOperation(c.get().begin_write(descriptors, remote.value)); }));
            if (notifier) op->notify_via(notifier, token);
            return op;
          },
          py::arg("local"), py::arg("remote"), py::arg("notifier") = nullptr, py::arg("token") = 0);

  // --- sideband ---
  py::class_<PyChannel>(m, "Channel")
      .def("publish",
           [](PyChannel& c, const std::string& name, const Metadata& md, std::int64_t ttl_ms) {
             without_gil([&] {
               c.get().publish(name, md.value, milliseconds(ttl_ms));
               return 0;
             });
           })
      .def("fetch",
           [](PyChannel& c, const std::string& name, std::int64_t timeout_ms) {
             return without_gil(
                 [&] { return Metadata{c.get().fetch(name, milliseconds(timeout_ms))}; });
           })
      .def("wait_for",
           [](PyChannel& c, const std::string& name, std::int64_t timeout_ms) {
             return without_gil(
                 [&] { return Metadata{c.get().wait_for(name, milliseconds(timeout_ms))}; });
           })
      .def("withdraw",
           [](PyChannel& c, const std::string& name) {
             without_gil([&] {
               c.get().withdraw(name);
               return 0;
             });
           })
      .def("list", [](PyChannel& c) { return without_gil([&] { return c.get().list(); }); })
      .def("request", [](PyChannel& c, const std::string& name, const Metadata& writable,
                         std::int64_t timeout_ms, PyStopSource& stop) {
        without_gil([&] {
          c.get().request(name, writable.value, milliseconds(timeout_ms), stop.token());
          return 0;
        });
      });

  m.def(
      "http_channel",
      [](const std::string& url, const std::string& token, std::int64_t connect_timeout_ms,
         std::int64_t request_timeout_ms) {
        memwire::sideband::HttpChannelOptions options;
        options.url = url;
        options.token = token;
        if (connect_timeout_ms > 0) options.connect_timeout = milliseconds(connect_timeout_ms);
        if (request_timeout_ms > 0) options.request_timeout = milliseconds(request_timeout_ms);
        return new PyChannel(std::make_unique<memwire::sideband::HttpChannel>(options));
      },
      py::arg("url"), py::arg("token") = "", py::arg("connect_timeout_ms") = 0,
      py::arg("request_timeout_ms") = 0);

  m.def(
      "nats_channel",
      [](const std::vector<std::string>& servers, const std::string& user,
         const std::string& password, const std::string& token, const std::string& subject_prefix,
         const std::string& kv_bucket, std::int64_t connect_timeout_ms,
         std::int64_t request_timeout_ms, int kv_replicas) {
        memwire::sideband::NatsOptions options;
        options.kv_replicas = kv_replicas;  // 0: one copy per known server, up to 3
        options.servers = servers;
        options.user = user;
        options.password = password;
        options.token = token;
        if (!subject_prefix.empty()) options.subject_prefix = subject_prefix;
        if (!kv_bucket.empty()) options.kv_bucket = kv_bucket;
        if (connect_timeout_ms > 0) options.connect_timeout = milliseconds(connect_timeout_ms);
        if (request_timeout_ms > 0) options.request_timeout = milliseconds(request_timeout_ms);
        return new PyChannel(
            without_gil([&] { return std::make_unique<memwire::sideband::NatsChannel>(options); }));
      },
      py::arg("servers"), py::arg("user") = "", py::arg("password") = "", py::arg("token") = "",
      py::arg("subject_prefix") = "", py::arg("kv_bucket") = "", py::arg("connect_timeout_ms") = 0,
      py::arg("request_timeout_ms") = 0, py::arg("kv_replicas") = 0);

  py::class_<memwire::sideband::HttpEndpoint>(m, "HttpEndpoint")
      .def(py::init([](const std::string& bind_address, int port, const std::string& token) {
             memwire::sideband::HttpEndpointOptions options;
             options.bind_address = bind_address;
             options.port = static_cast<std::uint16_t>(port);
             options.token = token;
             return new memwire::sideband::HttpEndpoint(options);
           }),
           py::arg("bind_address") = "127.0.0.1", py::arg("port") = 0, py::arg("token") = "")
      .def("start", &memwire::sideband::HttpEndpoint::start,
           py::call_guard<py::gil_scoped_release>())
      .def("stop", &memwire::sideband::HttpEndpoint::stop, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("port", &memwire::sideband::HttpEndpoint::port)
      .def_property_readonly("url", &memwire::sideband::HttpEndpoint::url);

  py::class_<PyStopSource>(m, "StopSource")
      .def(py::init<>())
      .def("request_stop", &PyStopSource::request_stop);

  py::class_<PySubscription>(m, "Subscription").def("close", &PySubscription::close);

  py::class_<PyLease>(m, "Lease")
      .def_property_readonly("name", &PyLease::name)
      .def("release", &PyLease::release)
      .def("notify", &PyLease::notify)
      .def("notify_via", &PyLease::notify_via)
      .def("status", &PyLease::status)
      .def("wait", &PyLease::wait)
      .def("metadata", &PyLease::metadata);

  py::class_<PyWorker>(m, "Worker")
      .def(py::init<PyConnector&, PyChannel&>(), py::keep_alive<1, 2>(), py::keep_alive<1, 3>())
      .def("publish",
           [](PyWorker& w, const std::string& name, const Descriptors& local, std::int64_t ttl_ms) {
             const auto& descriptors = local;
             return new PyLease(without_gil(
                 [&] { return w.get().publish(name, descriptors, milliseconds(ttl_ms)); }));
           })
      // handler(name) -> (list of NativeDescriptor, owner): runs on the channel's thread.
      .def("serve", [](PyWorker& w, const std::string& prefix, py::function handler,
                       std::int64_t write_timeout_ms) {
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
              int code = static_cast<int>(memwire::ErrorCode::NotFound);
              std::string message = error.what();
              py::object value = error.value();
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
        return new PySubscription(
            without_gil([&] { return w.get().serve(prefix, serve_one, options); }));
      });
}
