#pragma once

// What the native objects need to live beside an interpreter that other threads cannot always
// enter: the gate closed at exit, releasing the GIL where held, fork() detection, and ending a
// native handle or a held Python object safely.
#include <pthread.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace memwire_python {

namespace py = pybind11;
using std::chrono::milliseconds;

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
inline std::atomic<std::uint64_t> fork_count{0};

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

// A Python object kept alive by C++ (ServedData::owner): released with the GIL, or leaked when
// the interpreter is already shutting down.
inline std::shared_ptr<const void> hold_python(py::object object) {
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

}  // namespace memwire_python
