#pragma once

// How an operation's end reaches Python: a callable fired once (Signal), or a Notifier that an
// asyncio loop watches (eventfd), so that memwire's threads never wait for the GIL.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "interpreter.hpp"
#include "memwire/memwire.hpp"

namespace memwire_python {

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
inline void fire(Signal& signal, memwire::OperationStatus status) noexcept {
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

}  // namespace memwire_python
