#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "memwire/error.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {

// An eventfd that an event loop watches: readable once raise() was called since the reader last
// read it. Counts nothing: the reader reads it, then looks at whatever it guards.
class ReadinessSignal {
 public:
  ReadinessSignal() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (!fd_) throw Error(ErrorCode::Transport, "eventfd failed: no readiness signal");
  }

  int fd() const noexcept { return fd_.get(); }
  void raise() noexcept {
    const std::uint64_t one = 1;
    if (::write(fd_.get(), &one, sizeof one) < 0) {
      // EAGAIN only when the counter is full: it is readable already.
    }
  }

 private:
  FileDescriptor fd_;
};

}  // namespace memwire::detail
