#pragma once

#include <pthread.h>

namespace memwire::detail {

// Names the calling thread (15 characters at most: the kernel's limit) so that `top -H`,
// gdb and /proc/PID/task/*/comm tell memwire's threads apart. Best effort.
inline void name_this_thread(const char* name) noexcept {
  [[maybe_unused]] const int ignored = ::pthread_setname_np(::pthread_self(), name);
}

}  // namespace memwire::detail
