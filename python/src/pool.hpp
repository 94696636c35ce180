#pragma once

// The registered pool as the binding holds it, for the files that bind what works on pools
// (pools.cpp, grants.cpp, layers.cpp).
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "memwire/memwire.hpp"

namespace memwire_python {

struct PoolMeta {
  memwire::PoolMetadata value;
};

// (peer, tag, authenticated, request, kind, token); peer, tag and request as bytes: they come
// from a peer and need not be UTF-8 (Python decodes them). kind: OperationKind's value.
inline py::tuple notification_tuple(const memwire::Notification& n) {
  return py::make_tuple(py::bytes(n.peer), py::bytes(n.tag), n.authenticated, py::bytes(n.request),
                        static_cast<int>(n.kind), n.token);
}

// TagKinds from Python's value (memwire.TagKinds: 1 writes, 2 reads, 3 both).
inline memwire::TagKinds tag_kinds(int kinds) {
  if (kinds < 1 || kinds > 3)
    throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                         "kinds is TagKinds.WRITES, READS or BOTH, not " + std::to_string(kinds));
  return static_cast<memwire::TagKinds>(kinds);
}

inline py::object optional_notification(const std::optional<memwire::Notification>& n) {
  if (!n) return py::none();
  return notification_tuple(*n);
}

// A registered pool, the connector it belongs to and the Python owners of its memory (released
// only after the pool let go of it). Notifications stay in the pool's own queue.
class PyPool {
 public:
  PyPool(memwire::Pool pool, std::shared_ptr<memwire::Connector> connector, py::object owners)
      : pool_(std::make_shared<memwire::Pool>(std::move(pool))),
        connector_(std::move(connector)),
        owners_(std::move(owners)) {}
  ~PyPool() {
    close({});
    if (fd_ >= 0) ::close(fd_);
  }
  PyPool(const PyPool&) = delete;
  PyPool& operator=(const PyPool&) = delete;

  memwire::Pool& get() { return *shared(); }
  // For a call that releases the GIL: a close() from another thread meanwhile leaves it alive.
  std::shared_ptr<memwire::Pool> shared() {
    if (!pool_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "the pool was closed");
    return pool_;
  }
  // For waits: a closed pool's waits end with Cancelled, as the ones in flight do.
  std::shared_ptr<memwire::Pool> waitable() {
    if (!pool_)
      throw memwire::Error(memwire::ErrorCode::Cancelled,
                           "the pool was closed by its owner" + closed_because_);
    return pool_;
  }
  const memwire::Connector* connector() const { return connector_.get(); }

  // Pool::close(reason): revokes remote access, fails the transfers that use it here and waits
  // for them (GIL released), ends every wait with Cancelled (an event loop's through its fd).
  void close(const std::string& reason) {
    auto pool = std::move(pool_);  // other threads (holding the GIL) see it closed at once
    if (pool && !reason.empty()) closed_because_ = ": " + reason;
    // Closed here, not when the last reference goes: a wait in another thread holds one, and
    // must end now (Cancelled), as must an event loop's (the fd turns readable).
    if (pool && !birth_.inherited())
      without_gil([&] {
        pool->close(reason);
        return 0;
      });
    end_native(pool, birth_);
    end_native(connector_, birth_);
    owners_ = py::none();
  }
  bool closed() const { return !pool_; }

  PoolMeta metadata() { return {get().metadata()}; }
  PoolMeta metadata_for(const std::string& peer) { return {get().metadata_for(peer)}; }
  bool revoke(const std::string& peer) { return get().revoke(peer); }
  std::uint64_t peer_faults() { return get().peer_faults(); }
  std::uint64_t refusals() { return get().refusals(); }
  std::uint64_t block_count() { return get().block_count(); }
  std::size_t queued() { return pool_ ? pool_->queued_notifications() : 0; }

  // The pool's notification fd, duplicated: the loop may still watch it after close() (which
  // makes it readable, so that the loop's next try ends its waits) until this object goes.
  int fd() {
    if (fd_ < 0) {
      fd_ = ::dup(waitable()->notification_fd());
      if (fd_ < 0) throw memwire::Error(memwire::ErrorCode::Transport, "dup failed");
    }
    return fd_;
  }
  // Empties the eventfd's counter; the loop then tries its waits.
  void drain() noexcept {
    std::uint64_t count = 0;
    if (fd_ >= 0 && ::read(fd_, &count, sizeof count) < 0) {
      // EAGAIN: nothing signalled since the last drain.
    }
  }

  py::tuple next(std::int64_t timeout_ms) {
    auto pool = waitable();
    return notification_tuple(
        without_gil([&] { return pool->next_notification(milliseconds(timeout_ms)); }));
  }
  py::tuple wait_for_tag(const std::string& tag, std::int64_t timeout_ms, const std::string& from,
                         int kinds) {
    const auto which = tag_kinds(kinds);
    auto pool = waitable();
    return notification_tuple(without_gil(
        [&] { return pool->wait_for_tag(tag, milliseconds(timeout_ms), from, which); }));
  }
  py::object try_next() { return optional_notification(waitable()->try_next_notification()); }
  py::object try_tag(const std::string& tag, const std::string& from, int kinds) {
    return optional_notification(waitable()->try_wait_for_tag(tag, from, tag_kinds(kinds)));
  }

 private:
  ForkBirth birth_;
  std::shared_ptr<memwire::Pool> pool_;
  std::shared_ptr<memwire::Connector> connector_;
  py::object owners_;
  std::string closed_because_;  // ": <the reason close() was given>"
  int fd_ = -1;
};

// A block pair as Python passes it: (remote, local, remote_offset, local_offset).
using PairSpec = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>;
// A slice: (remote_offset, local_offset, length).
using SliceSpec = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;

inline std::vector<memwire::BlockPair> block_pairs(const std::vector<PairSpec>& pairs) {
  std::vector<memwire::BlockPair> out;
  out.reserve(pairs.size());
  for (const auto& [remote, local, remote_offset, local_offset] : pairs)
    out.push_back({remote, local, remote_offset, local_offset});
  return out;
}

inline memwire::BlockSlice block_slice(const SliceSpec& slice) {
  const auto& [remote_offset, local_offset, length] = slice;
  return {remote_offset, local_offset, length};
}

}  // namespace memwire_python
