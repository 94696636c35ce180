#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace memwire {

// Guards memory that transport threads touch on behalf of a remote peer. A transport pins the
// gate for as long as it reads or writes the memory; closing the gate refuses new pins and
// waits until the last pin is gone, so the owner may free the memory once close() returns.
class AccessGate {
 public:
  class Pin {
   public:
    explicit Pin(AccessGate* gate) : gate_(gate) {}
    Pin(Pin&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
    Pin& operator=(Pin&& other) noexcept {
      if (this != &other) {
        release();
        gate_ = std::exchange(other.gate_, nullptr);
      }
      return *this;
    }
    ~Pin() { release(); }

   private:
    void release() noexcept;
    AccessGate* gate_;
  };

  // Empty once the gate is closed. A pin may be released on another thread.
  std::optional<Pin> pin();
  bool is_open() const;

  // Something that makes a holder let go at once (e.g. shuts its socket), used when pins are
  // still held `grace` after close() began: a stalled peer must not hold memory hostage. A
  // holder that pinned before close() may add its breaker while close() waits: it is kept, or
  // run at once when close() broke the others already.
  void add_breaker(std::uintptr_t holder, std::function<void()> breaker);
  // The holder is gone (a connection that closed): its breaker goes too.
  void remove_breaker(std::uintptr_t holder);
  // Something that lets go of its pin at once when the gate closes, without waiting for a peer
  // (a read answer landing in the memory turns to discarding the rest): run on the closing
  // thread before close() waits for pins. remove_releaser() once the pin is let go otherwise.
  void add_releaser(std::uintptr_t holder, std::function<void()> releaser);
  void remove_releaser(std::uintptr_t holder);

  void close(std::chrono::milliseconds grace);
  // On a thread that serves many peers (an event loop), close() waits kServingThreadGrace at
  // most, not the whole grace, before it breaks the holders: the pins it would wait for may be
  // ones only that thread can let go of (frames queued on its connections). Not at once: a pin
  // may be another loop's that is letting go of it this moment (an answer whose last byte went
  // out, its reader's completion notice already in on another connection of this loop), and
  // breaking would cut that connection and every transfer on it.
  static void break_at_once_on_this_thread(bool at_once) noexcept;
  static constexpr std::chrono::milliseconds kServingThreadGrace{10};
  // Refuses new pins without waiting for the held ones; close() may follow to wait for them.
  void refuse();

 private:
  mutable std::mutex mutex_;
  std::condition_variable released_;
  bool open_ = true;
  std::size_t pins_ = 0;
  bool breaking_ = false;  // close() ran its breakers and waits for the pins they free
  std::map<std::uintptr_t, std::function<void()>> breakers_;
  std::map<std::uintptr_t, std::function<void()>> releasers_;
};

}  // namespace memwire
