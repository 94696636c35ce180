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
// - A pool's notifications (tags) go to a native PoolInbox on memwire's I/O thread, which never
//   takes the GIL: blocking waits sleep on its condition variable (GIL released), an event loop
//   watches its eventfd and takes notifications on the loop's own thread.
#include <pthread.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "call_runner.hpp"
#include "host_memory.hpp"
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

// --- fork() ---------------------------------------------------------------------------------

// Counts fork()s into this process. A native object records it when made; in a child forked
// after that, the object's threads, connections and published names are the parent's.
std::atomic<std::uint64_t> fork_count{0};

class ForkBirth {
 public:
  ForkBirth() noexcept : generation_(current()) {}
  bool inherited() const noexcept { return current() != generation_; }

 private:
  static std::uint64_t current() noexcept {
    static const bool registered =
        pthread_atfork(nullptr, nullptr, [] { fork_count.fetch_add(1); }) == 0;
    (void)registered;
    return fork_count.load();
  }
  std::uint64_t generation_;
};

// Ends a native handle (unique_ptr, shared_ptr, optional) without the GIL. In a child forked
// after it was made it is left alone, leaked on purpose: ending it would join threads that do
// not exist here, or withdraw and cancel what the parent still uses.
template <class Handle>
void end_native(Handle& handle, const ForkBirth& birth) {
  if (!handle) return;
  if (birth.inherited()) {
    new Handle(std::move(handle));
    handle.reset();
    return;
  }
  without_gil([&] {
    handle.reset();
    return 0;
  });
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

// --- Pools --------------------------------------------------------------------------------

struct PoolMeta {
  memwire::PoolMetadata value;
};

PoolMeta parse_pool_metadata(const std::string& json) {
  return {memwire::PoolMetadata::from_json(json)};
}

py::dict pool_metadata_fields(const memwire::PoolMetadata& metadata) {
  py::list regions;
  for (const auto& r : metadata.regions()) {
    py::dict item;
    item["device"] = r.device.to_string();
    item["base"] = r.base;
    item["block_size"] = r.block_size;
    item["stride"] = r.stride;
    item["count"] = r.count;
    regions.append(item);
  }
  py::list transports;
  for (const auto& t : metadata.endpoint().transports) transports.append(t.name);
  py::dict fields;
  fields["name"] = metadata.name();
  fields["generation"] = metadata.generation();
  fields["regions"] = regions;
  fields["block_count"] = metadata.block_count();
  fields["connector"] = metadata.endpoint().connector;
  fields["host"] = metadata.endpoint().host;
  fields["transports"] = transports;
  return fields;
}

// A pool's notifications as the binding keeps them. memwire hands each one to this inbox on its
// I/O thread (Pool::on_notification, set before the metadata leaves the process), which queues
// it without the GIL and makes an eventfd readable: blocking waits sleep on the condition
// variable (GIL released), an event loop watches the eventfd and takes what it waits for on its
// own thread, so an abandoned asyncio wait never takes a notification with it. Same rules as
// memwire's own queue: a tag past max_queued_notifications fails its sender; failures end the
// waits that concern them (at most kMostFailuresQueued kept); a returning peer clears its loss.
class PoolInbox {
 public:
  explicit PoolInbox(std::size_t max_queued)
      : max_queued_(max_queued), fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw memwire::Error(memwire::ErrorCode::Transport, "eventfd failed");
  }
  ~PoolInbox() { ::close(fd_); }
  PoolInbox(const PoolInbox&) = delete;
  PoolInbox& operator=(const PoolInbox&) = delete;

  int fd() const noexcept { return fd_; }

  // On memwire's I/O thread. Throws (the sender's transfer fails) when a tag finds no room.
  void post(const memwire::Notification& notification) {
    {
      std::lock_guard lock(mutex_);
      if (notification.error.empty()) {
        if (closed_)
          throw memwire::Error(memwire::ErrorCode::Cancelled, "the pool was closed by its owner");
        if (queue_.size() - failures_ >= max_queued_)
          throw memwire::Error(memwire::ErrorCode::Transport,
                               "the pool's owner has " + std::to_string(max_queued_) +
                                   " notifications queued and takes no more "
                                   "(max_queued_notifications)");
        std::erase_if(queue_, [&](const memwire::Notification& queued) {
          const bool stale =
              !queued.error.empty() && queued.tag.empty() && queued.peer == notification.peer;
          failures_ -= stale ? 1 : 0;
          return stale;
        });
      } else {
        if (closed_) return;
        if (failures_ == kMostFailuresQueued) {
          auto oldest = std::find_if(queue_.begin(), queue_.end(),
                                     [](const auto& queued) { return !queued.error.empty(); });
          queue_.erase(oldest);
          --failures_;
        }
        ++failures_;
      }
      queue_.push_back(notification);
    }
    changed_.notify_all();
    wake();
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      closed_ = true;
      queue_.clear();
      failures_ = 0;
    }
    changed_.notify_all();
    wake();
  }

  // Blocking (the caller released the GIL). Throws Timeout, PeerLost, Cancelled.
  memwire::Notification next(milliseconds timeout) {
    return wait(timeout, [this] { return take_next(); });
  }
  memwire::Notification wait_for_tag(const std::string& tag, milliseconds timeout,
                                     const std::string& from) {
    return wait(timeout, [&] { return take_tag(tag, from); });
  }
  // Without waiting: nothing when none fits yet (an event loop calls these when woken).
  std::optional<memwire::Notification> try_next() {
    std::lock_guard lock(mutex_);
    check_open();
    return take_next();
  }
  std::optional<memwire::Notification> try_tag(const std::string& tag, const std::string& from) {
    std::lock_guard lock(mutex_);
    check_open();
    return take_tag(tag, from);
  }
  // Empties the eventfd's counter; the loop then looks at the queue.
  void drain() noexcept {
    std::uint64_t count = 0;
    if (::read(fd_, &count, sizeof count) < 0) {
      // EAGAIN: nothing signalled since the last drain.
    }
  }
  std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }
  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

 private:
  static constexpr std::size_t kMostFailuresQueued = 1024;

  void wake() noexcept {
    const std::uint64_t one = 1;
    if (::write(fd_, &one, sizeof one) < 0) {
      // EAGAIN only when the counter is full, i.e. already readable.
    }
  }
  void check_open() const {  // mutex_ held
    if (closed_) throw memwire::Error(memwire::ErrorCode::Cancelled, "the pool was closed");
  }
  [[noreturn]] static void raise(const memwire::Notification& failure) {
    throw memwire::Error(
        memwire::ErrorCode::PeerLost,
        failure.tag.empty()
            ? "peer " + failure.peer + " was lost during a tagged transfer: " + failure.error
            : "the transfer tagged '" + failure.tag + "' from " + failure.peer +
                  " failed: " + failure.error);
  }
  // mutex_ held.
  std::optional<memwire::Notification> take_next() {
    if (queue_.empty()) return std::nullopt;
    auto first = std::move(queue_.front());
    queue_.pop_front();
    if (!first.error.empty()) {
      --failures_;
      raise(first);
    }
    return first;
  }
  std::optional<memwire::Notification> take_tag(const std::string& tag, const std::string& from) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (!from.empty() && it->peer != from) continue;
      if (it->error.empty()) {
        if (it->tag != tag) continue;
        auto found = std::move(*it);
        queue_.erase(it);
        return found;
      }
      if (it->tag.empty()) raise(*it);  // a lost peer stays queued: later waits end too
      if (it->tag != tag) continue;
      auto failure = std::move(*it);
      queue_.erase(it);
      --failures_;
      raise(failure);
    }
    return std::nullopt;
  }
  template <class Found>
  memwire::Notification wait(milliseconds timeout, Found found) {
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      check_open();
      if (auto taken = found()) return std::move(*taken);
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
        check_open();
        if (auto taken = found()) return std::move(*taken);
        throw memwire::Error(memwire::ErrorCode::Timeout,
                             "no notification within " + std::to_string(timeout.count()) + " ms");
      }
    }
  }

  const std::size_t max_queued_;
  const int fd_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<memwire::Notification> queue_;
  std::size_t failures_ = 0;
  bool closed_ = false;
};

// (peer, tag) as bytes: both come from a peer and need not be UTF-8 (Python decodes them).
py::tuple notification_tuple(const memwire::Notification& n) {
  return py::make_tuple(py::bytes(n.peer), py::bytes(n.tag));
}

py::object optional_notification(const std::optional<memwire::Notification>& n) {
  if (!n) return py::none();
  return notification_tuple(*n);
}

// One region as Python describes it: (address, block_size, stride, count, device).
using RegionSpec =
    std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t, std::uint64_t, std::string>;

// A registered pool, the connector it belongs to and the Python owners of its memory (released
// only after the pool let go of it), and its inbox.
class PyPool {
 public:
  PyPool(memwire::Pool pool, std::shared_ptr<PoolInbox> inbox,
         std::shared_ptr<memwire::Connector> connector, py::object owners)
      : pool_(std::make_shared<memwire::Pool>(std::move(pool))),
        inbox_(std::move(inbox)),
        connector_(std::move(connector)),
        owners_(std::move(owners)) {}
  ~PyPool() { close(); }
  PyPool(const PyPool&) = delete;
  PyPool& operator=(const PyPool&) = delete;

  memwire::Pool& get() { return *shared(); }
  // For a call that releases the GIL: a close() from another thread meanwhile leaves it alive.
  std::shared_ptr<memwire::Pool> shared() {
    if (!pool_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "the pool was closed");
    return pool_;
  }
  const memwire::Connector* connector() const { return connector_.get(); }

  // Revokes remote access, fails the transfers that use it here and waits for them (GIL
  // released), ends every wait with Cancelled.
  void close() {
    if (inbox_) inbox_->close();
    auto pool = std::move(pool_);  // other threads (holding the GIL) see it closed at once
    end_native(pool, birth_);
    end_native(connector_, birth_);
    owners_ = py::none();
  }
  bool closed() const { return !pool_; }

  PoolMeta metadata() { return {get().metadata()}; }
  std::uint64_t block_count() { return get().block_count(); }
  std::size_t queued() { return inbox_->queued(); }
  int fd() const { return inbox_->fd(); }
  void drain() { inbox_->drain(); }

  py::tuple next(std::int64_t timeout_ms) {
    auto inbox = inbox_;
    return notification_tuple(without_gil([&] { return inbox->next(milliseconds(timeout_ms)); }));
  }
  py::tuple wait_for_tag(const std::string& tag, std::int64_t timeout_ms, const std::string& from) {
    auto inbox = inbox_;
    return notification_tuple(
        without_gil([&] { return inbox->wait_for_tag(tag, milliseconds(timeout_ms), from); }));
  }
  py::object try_next() { return optional_notification(inbox_->try_next()); }
  py::object try_tag(const std::string& tag, const std::string& from) {
    return optional_notification(inbox_->try_tag(tag, from));
  }

 private:
  ForkBirth birth_;
  std::shared_ptr<memwire::Pool> pool_;
  std::shared_ptr<PoolInbox> inbox_;
  std::shared_ptr<memwire::Connector> connector_;
  py::object owners_;
};

std::vector<memwire::BlockPair> block_pairs(
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& pairs) {
  std::vector<memwire::BlockPair> out;
  out.reserve(pairs.size());
  for (const auto& [remote, local] : pairs) out.push_back({remote, local});
  return out;
}

// Starts a block transfer (`start(pool)`, returning a BlockTransfer) without the GIL. The pool
// reference taken here ends in there too: a close() from another thread meanwhile leaves the
// last reference (whose end waits for transfers) to this call, which must not hold the GIL.
template <class Start>
PyOperation* start_blocks(PyConnector& connector, PyPool& local, py::object owners,
                          const std::shared_ptr<Notifier>& notifier, std::uint64_t token,
                          Start start) {
  auto pool = local.shared();
  auto* op = new PyOperation(without_gil([&] {
                               auto held = std::move(pool);
                               return AnyOperation(start(*held));
                             }),
                             connector.shared(), std::move(owners));
  if (notifier) op->notify_via(notifier, token);
  return op;
}

// --- Sideband -------------------------------------------------------------------------------

// One sideband call run by a CallRunner for an event loop: its outcome waits here, and the
// loop is woken through its Notifier (token); result() then hands it over (or raises).
class PyCall {
 public:
  using Outcome = std::variant<std::monostate, Metadata, std::vector<std::string>,
                               std::shared_ptr<memwire::sideband::Lease>,
                               std::shared_ptr<memwire::sideband::Subscription>>;

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

class PyStopSource {
 public:
  void request_stop() { source_.request_stop(); }
  std::stop_token token() const { return source_.get_token(); }

 private:
  std::stop_source source_;
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

// A lease keeps its worker (and so the channel it withdraws from and the connector of its
// operation) and the Python owners of its memory until it ends: a lease collected after
// everything else a coroutine held still releases safely.
class PyLease {
 public:
  PyLease(memwire::sideband::Lease lease, std::shared_ptr<WorkerHold> worker, py::object owners)
      : worker_(std::move(worker)), lease_(std::move(lease)), owners_(std::move(owners)) {}
  ~PyLease() { release(); }
  PyLease(const PyLease&) = delete;
  PyLease& operator=(const PyLease&) = delete;

  std::string name() { return checked().name(); }
  void release() {
    end_native(lease_, birth_);  // ending the lease withdraws its name
    end_native(worker_, birth_);
    owners_ = py::none();
  }
  memwire::sideband::Lease& checked() {
    if (!lease_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "lease was released");
    return *lease_;
  }
  // The Python owners of the memory the lease now publishes (after a republish).
  void keep(py::object owners) { owners_ = std::move(owners); }
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
  ForkBirth birth_;
  std::shared_ptr<WorkerHold> worker_;
  std::optional<memwire::sideband::Lease> lease_;
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

// The HTTP endpoint embedded in this process (its server threads are this process's).
class PyHttpEndpoint {
 public:
  explicit PyHttpEndpoint(memwire::sideband::HttpEndpointOptions options)
      : endpoint_(std::make_unique<memwire::sideband::HttpEndpoint>(std::move(options))) {}
  ~PyHttpEndpoint() { end_native(endpoint_, birth_); }
  PyHttpEndpoint(const PyHttpEndpoint&) = delete;
  PyHttpEndpoint& operator=(const PyHttpEndpoint&) = delete;
  memwire::sideband::HttpEndpoint& get() {
    if (birth_.inherited())
      throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                           "this HttpEndpoint was made before fork() and belongs to the parent");
    return *endpoint_;
  }

 private:
  ForkBirth birth_;
  std::unique_ptr<memwire::sideband::HttpEndpoint> endpoint_;
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
  m.def(
      "host_memory_access",
      [](std::uintptr_t address, std::size_t size) {
        return static_cast<int>(memwire_python::host_memory_access(address, size));
      },
      "0: not all mapped readable, 1: readable, 2: readable and writable");
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
      .def("spin", &PyOperation::spin)
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
      // `owners` (the Descriptor list) stays alive until the operation let go of its memory.
      .def(
          "create_readable",
          [](PyConnector& c, const Descriptors& local, py::object owners) {
            const auto& descriptors = local;
            return new PyOperation(
                without_gil([&] { return AnyOperation(c.get().create_readable(descriptors)); }),
                c.shared(), std::move(owners));
          },
          py::arg("local"), py::arg("owners") = py::none())
      .def(
          "create_writable",
          [](PyConnector& c, const Descriptors& local, py::object owners) {
            const auto& descriptors = local;
            return new PyOperation(
                without_gil([&] { return AnyOperation(c.get().create_writable(descriptors)); }),
                c.shared(), std::move(owners));
          },
          py::arg("local"), py::arg("owners") = py::none())
      // begin_* take an optional callable so that the completion is armed in the same call.
      .def(
          "begin_read",
          [](PyConnector& c, const Metadata& remote, const Descriptors& local,
             std::shared_ptr<Notifier> notifier, std::uint64_t token, py::object owners) {
            const auto& descriptors = local;
            auto* op = new PyOperation(
                without_gil(
                    [&] { return AnyOperation(c.get().begin_read(remote.value, descriptors)); }),
                c.shared(), std::move(owners));
            if (notifier) op->notify_via(notifier, token);
            return op;
          },
          py::arg("remote"), py::arg("local"), py::arg("notifier") = nullptr, py::arg("token") = 0,
          py::arg("owners") = py::none())
      .def(
          "begin_write",
          [](PyConnector& c, const Descriptors& local, const Metadata& remote,
             std::shared_ptr<Notifier> notifier, std::uint64_t token, py::object owners) {
            const auto& descriptors = local;
            auto* op = new PyOperation(
                without_gil(
                    [&] { return AnyOperation(c.get().begin_write(descriptors, remote.value)); }),
                c.shared(), std::move(owners));
            if (notifier) op->notify_via(notifier, token);
            return op;
          },
          py::arg("local"), py::arg("remote"), py::arg("notifier") = nullptr, py::arg("token") = 0,
          py::arg("owners") = py::none())
      // Pools. `owners` (the memory's Python objects) stay alive until the pool let go of it.
      .def(
          "register_pool",
          [](PyConnector& c, const std::vector<RegionSpec>& specs, const std::string& name,
             bool remote_read, bool remote_write, std::size_t max_queued, py::object owners) {
            std::vector<memwire::BlockRegion> regions;
            regions.reserve(specs.size());
            for (const auto& [address, block_size, stride, count, device] : specs)
              regions.push_back({reinterpret_cast<void*>(address), block_size, stride, count,
                                 memwire::Device::parse(device)});
            memwire::PoolOptions options;
            options.name = name;
            options.remote_read = remote_read;
            options.remote_write = remote_write;
            options.max_queued_notifications = max_queued;
            auto inbox = std::make_shared<PoolInbox>(max_queued);
            auto pool = without_gil([&] {
              auto registered = c.get().register_pool(std::move(regions), std::move(options));
              // Before the metadata leaves this process: every notification reaches the inbox.
              registered.on_notification([inbox](const memwire::Notification& notification) {
                inbox->post(notification);
              });
              return registered;
            });
            return new PyPool(std::move(pool), std::move(inbox), c.shared(), std::move(owners));
          },
          py::arg("regions"), py::arg("name") = "", py::arg("remote_read") = true,
          py::arg("remote_write") = true, py::arg("max_queued") = 65536,
          py::arg("owners") = py::none())
      .def(
          "read_blocks",
          [](PyConnector& c, const PoolMeta& remote,
             const std::vector<std::pair<std::uint64_t, std::uint64_t>>& pairs, PyPool& local,
             const std::string& tag, std::shared_ptr<Notifier> notifier, std::uint64_t token,
             py::object owners) {
            auto blocks = block_pairs(pairs);
            return start_blocks(c, local, std::move(owners), notifier, token,
                                [&](memwire::Pool& pool) {
                                  return c.get().read_blocks(remote.value, blocks, pool, tag);
                                });
          },
          py::arg("remote"), py::arg("pairs"), py::arg("local"), py::arg("tag") = "",
          py::arg("notifier") = nullptr, py::arg("token") = 0, py::arg("owners") = py::none())
      .def(
          "write_blocks",
          [](PyConnector& c, PyPool& local,
             const std::vector<std::pair<std::uint64_t, std::uint64_t>>& pairs,
             const PoolMeta& remote, const std::string& tag, std::shared_ptr<Notifier> notifier,
             std::uint64_t token, py::object owners) {
            auto blocks = block_pairs(pairs);
            return start_blocks(c, local, std::move(owners), notifier, token,
                                [&](memwire::Pool& pool) {
                                  return c.get().write_blocks(pool, blocks, remote.value, tag);
                                });
          },
          py::arg("local"), py::arg("pairs"), py::arg("remote"), py::arg("tag") = "",
          py::arg("notifier") = nullptr, py::arg("token") = 0, py::arg("owners") = py::none());

  py::class_<PoolMeta>(m, "PoolMetadata")
      .def_static("from_json", &parse_pool_metadata)
      .def("to_json", [](const PoolMeta& self) { return self.value.to_json(); })
      .def("fields", [](const PoolMeta& self) { return pool_metadata_fields(self.value); })
      .def("__eq__", [](const PoolMeta& a, const PoolMeta& b) { return a.value == b.value; });

  py::class_<PyPool>(m, "Pool")
      .def("metadata", &PyPool::metadata)
      .def("block_count", &PyPool::block_count)
      .def("queued", &PyPool::queued)
      .def_property_readonly("fd", &PyPool::fd)
      .def("drain", &PyPool::drain)
      .def("next", &PyPool::next)
      .def("wait_for_tag", &PyPool::wait_for_tag)
      .def("try_next", &PyPool::try_next)
      .def("try_tag", &PyPool::try_tag)
      .def("close", &PyPool::close)
      .def_property_readonly("closed", &PyPool::closed);

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
      .def("request",
           [](PyChannel& c, const std::string& name, const Metadata& writable,
              std::int64_t timeout_ms, PyStopSource& stop) {
             without_gil([&] {
               c.get().request(name, writable.value, milliseconds(timeout_ms), stop.token());
               return 0;
             });
           })
      // start_*: the same calls on the channel's own threads, for an event loop (notifier,
      // token); the returned Call gives the outcome, or stops the call when cancelled.
      .def("start_fetch",
           [](PyChannel& c, std::string name, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, timeout_ms](std::stop_token) -> PyCall::Outcome {
                   return Metadata{channel->fetch(name, milliseconds(timeout_ms))};
                 },
                 std::move(notifier), token);
           })
      .def("start_wait_for",
           [](PyChannel& c, std::string name, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, timeout_ms](std::stop_token stop) -> PyCall::Outcome {
                   return Metadata{channel->wait_for(name, milliseconds(timeout_ms), stop)};
                 },
                 std::move(notifier), token);
           })
      .def("start_publish",
           [](PyChannel& c, std::string name, const Metadata& md, std::int64_t ttl_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, md, ttl_ms](std::stop_token) -> PyCall::Outcome {
                   channel->publish(name, md.value, milliseconds(ttl_ms));
                   return {};
                 },
                 std::move(notifier), token);
           })
      .def("start_withdraw",
           [](PyChannel& c, std::string name, std::shared_ptr<Notifier> notifier,
              std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name](std::stop_token) -> PyCall::Outcome {
                   channel->withdraw(name);
                   return {};
                 },
                 std::move(notifier), token);
           })
      .def("start_list",
           [](PyChannel& c, std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared()](std::stop_token) -> PyCall::Outcome {
                   return channel->list();
                 },
                 std::move(notifier), token);
           })
      .def("start_request", [](PyChannel& c, std::string name, const Metadata& writable,
                               std::int64_t timeout_ms, PyStopSource& abandon,
                               std::shared_ptr<Notifier> notifier, std::uint64_t token) {
        return start_call(
            *c.runner(),
            [channel = c.shared(), name, writable, timeout_ms,
             abandon = abandon.token()](std::stop_token stop) -> PyCall::Outcome {
              // Either the operation's failure or the task's cancellation ends the wait.
              std::stop_source either;
              std::stop_callback on_abandon(abandon, [&] { either.request_stop(); });
              std::stop_callback on_stop(stop, [&] { either.request_stop(); });
              channel->request(name, writable.value, milliseconds(timeout_ms), either.get_token());
              return {};
            },
            std::move(notifier), token);
      });

  py::class_<PyCall, std::shared_ptr<PyCall>>(m, "Call")
      .def("cancel", &PyCall::cancel)
      .def("result", [](PyCall& call) -> py::object {
        auto [outcome, error] = call.take();
        if (error) std::rethrow_exception(error);
        if (auto* md = std::get_if<Metadata>(&outcome)) return py::cast(std::move(*md));
        if (auto* names = std::get_if<std::vector<std::string>>(&outcome))
          return py::cast(std::move(*names));
        return py::none();
      });

  // Options come as a dict of the C++ option names (the Python classes build it), so that a new
  // option is one line here and one keyword there.
  m.def("http_channel", [](const py::dict& given, std::size_t max_calls) {
    memwire::sideband::HttpChannelOptions options;
    for (auto [key, value] : given) {
      const auto name = key.cast<std::string>();
      if (name == "url")
        options.url = value.cast<std::string>();
      else if (name == "token")
        options.token = value.cast<std::string>();
      else if (name == "user")
        options.user = value.cast<std::string>();
      else if (name == "password")
        options.password = value.cast<std::string>();
      else if (name == "ca_file")
        options.ca_file = value.cast<std::string>();
      else if (name == "verify_peer")
        options.verify_peer = value.cast<bool>();
      else if (name == "connect_timeout_ms")
        options.connect_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "request_timeout_ms")
        options.request_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "max_retries")
        options.max_retries = value.cast<int>();
      else if (name == "max_reply_size")
        options.max_reply_size = value.cast<std::size_t>();
      else
        throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                             "unknown HttpChannel option " + name);
    }
    return new PyChannel(std::make_shared<memwire::sideband::HttpChannel>(options), max_calls);
  });

  m.def("nats_channel", [](const py::dict& given, std::size_t max_calls) {
    memwire::sideband::NatsOptions options;
    auto text = [](py::handle value) { return value.cast<std::string>(); };
    for (auto [key, value] : given) {
      const auto name = key.cast<std::string>();
      if (name == "servers")
        options.servers = value.cast<std::vector<std::string>>();
      else if (name == "connection_name")
        options.connection_name = text(value);
      else if (name == "user")
        options.user = text(value);
      else if (name == "password")
        options.password = text(value);
      else if (name == "token")
        options.token = text(value);
      else if (name == "nkey_public")
        options.nkey_public = text(value);
      else if (name == "nkey_seed_file")
        options.nkey_seed_file = text(value);
      else if (name == "creds_file")
        options.creds_file = text(value);
      else if (name == "tls")
        options.tls = value.cast<bool>();
      else if (name == "ca_file")
        options.ca_file = text(value);
      else if (name == "cert_file")
        options.cert_file = text(value);
      else if (name == "key_file")
        options.key_file = text(value);
      else if (name == "subject_prefix")
        options.subject_prefix = text(value);
      else if (name == "kv_bucket")
        options.kv_bucket = text(value);
      else if (name == "inbox_prefix")
        options.inbox_prefix = text(value);
      else if (name == "kv_replicas")
        options.kv_replicas = value.cast<int>();
      else if (name == "kv_max_age_ms")
        options.kv_max_age = milliseconds(value.cast<std::int64_t>());
      else if (name == "connect_timeout_ms")
        options.connect_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "request_timeout_ms")
        options.request_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "max_reconnect")
        options.max_reconnect = value.cast<int>();
      else
        throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                             "unknown NatsChannel option " + name);
    }
    // Warnings about the registry's buckets go to stderr, as the memwire programs write them.
    options.log = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
    return new PyChannel(
        without_gil([&] { return std::make_shared<memwire::sideband::NatsChannel>(options); }),
        max_calls);
  });

  py::class_<PyHttpEndpoint>(m, "HttpEndpoint")
      .def(py::init([](const std::string& bind_address, int port, const std::string& token) {
             memwire::sideband::HttpEndpointOptions options;
             options.bind_address = bind_address;
             options.port = static_cast<std::uint16_t>(port);
             options.token = token;
             return new PyHttpEndpoint(options);
           }),
           py::arg("bind_address") = "127.0.0.1", py::arg("port") = 0, py::arg("token") = "")
      .def("start",
           [](PyHttpEndpoint& e) {
             auto& endpoint = e.get();
             without_gil([&] {
               endpoint.start();
               return 0;
             });
           })
      .def("stop",
           [](PyHttpEndpoint& e) {
             auto& endpoint = e.get();
             without_gil([&] {
               endpoint.stop();
               return 0;
             });
           })
      .def_property_readonly("port", [](PyHttpEndpoint& e) { return e.get().port(); })
      .def_property_readonly("url", [](PyHttpEndpoint& e) { return e.get().url(); });

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
                       py::str(value.get_type().attr("__name__")).cast<std::string>() + ": " +
                       py::str(value).cast<std::string>();
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
