#pragma once

// The process's second CPU for one large copy: `first` runs on the calling thread while a
// helper thread, started once and parked between tasks, runs `second`. Used by the cross-memory
// copies (cross_memory.cpp) and the mapped copies (bulk_copy.cpp): one CPU's copy moves about
// half of what memory does here (11-12 GB/s against 21-24 GB/s for two).

namespace memwire::detail {

// A borrowed callable: no allocation, valid while the caller's frame is.
class WorkRef {
 public:
  template <typename Work>
  explicit WorkRef(Work& work) noexcept
      : object_(&work), call_([](void* object) { (*static_cast<Work*>(object))(); }) {}
  void operator()() const { call_(object_); }

 private:
  void* object_;
  void (*call_)(void*);
};

// Runs `first` here and `second` on the helper at once, and returns once both ended (also when
// `first` throws: the helper may be using the caller's frame). False, having run neither, when
// there is one CPU, the helper is busy with another caller's task, or no thread can start: the
// caller then does all the work itself. `second` must not throw.
bool run_on_two_cpus(WorkRef first, WorkRef second);

}  // namespace memwire::detail
