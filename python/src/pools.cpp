// Pools: registration with block geometry, block transfers, and the pool's own notification
// queue (blocking waits without the GIL; an event loop watches the pool's notification fd).
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "operation.hpp"

namespace memwire_python {
namespace {

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

// (peer, tag, authenticated); peer and tag as bytes: they come from a peer and need not be
// UTF-8 (Python decodes them).
py::tuple notification_tuple(const memwire::Notification& n) {
  return py::make_tuple(py::bytes(n.peer), py::bytes(n.tag), n.authenticated);
}

py::object optional_notification(const std::optional<memwire::Notification>& n) {
  if (!n) return py::none();
  return notification_tuple(*n);
}

// One region as Python describes it: (address, block_size, stride, count, device).
using RegionSpec =
    std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t, std::uint64_t, std::string>;

// A registered pool, the connector it belongs to and the Python owners of its memory (released
// only after the pool let go of it). Notifications stay in the pool's own queue.
class PyPool {
 public:
  PyPool(memwire::Pool pool, std::shared_ptr<memwire::Connector> connector, py::object owners)
      : pool_(std::make_shared<memwire::Pool>(std::move(pool))),
        connector_(std::move(connector)),
        owners_(std::move(owners)) {}
  ~PyPool() {
    close();
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
    if (!pool_) throw memwire::Error(memwire::ErrorCode::Cancelled, "the pool was closed");
    return pool_;
  }
  const memwire::Connector* connector() const { return connector_.get(); }

  // Revokes remote access, fails the transfers that use it here and waits for them (GIL
  // released), ends every wait with Cancelled (an event loop's through its fd).
  void close() {
    auto pool = std::move(pool_);  // other threads (holding the GIL) see it closed at once
    // Closed here, not when the last reference goes: a wait in another thread holds one, and
    // must end now (Cancelled), as must an event loop's (the fd turns readable).
    if (pool && !birth_.inherited())
      without_gil([&] {
        pool->close();
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
  py::tuple wait_for_tag(const std::string& tag, std::int64_t timeout_ms, const std::string& from) {
    auto pool = waitable();
    return notification_tuple(
        without_gil([&] { return pool->wait_for_tag(tag, milliseconds(timeout_ms), from); }));
  }
  py::object try_next() { return optional_notification(waitable()->try_next_notification()); }
  py::object try_tag(const std::string& tag, const std::string& from) {
    return optional_notification(waitable()->try_wait_for_tag(tag, from));
  }

 private:
  ForkBirth birth_;
  std::shared_ptr<memwire::Pool> pool_;
  std::shared_ptr<memwire::Connector> connector_;
  py::object owners_;
  int fd_ = -1;
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

}  // namespace

void bind_pools(py::module_& m, py::class_<PyConnector>& connector) {
  connector
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
            auto pool = without_gil(
                [&] { return c.get().register_pool(std::move(regions), std::move(options)); });
            return new PyPool(std::move(pool), c.shared(), std::move(owners));
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
      .def("metadata_for", &PyPool::metadata_for)
      .def("revoke", &PyPool::revoke)
      .def("peer_faults", &PyPool::peer_faults)
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
}

}  // namespace memwire_python
