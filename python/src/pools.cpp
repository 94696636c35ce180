// Pools: registration with block geometry, block transfers, and the pool's own notification
// queue (blocking waits without the GIL; an event loop watches the pool's notification fd).
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "operation.hpp"
#include "pool.hpp"

namespace memwire_python {
namespace {

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

// One region as Python describes it: (address, block_size, stride, count, device).
using RegionSpec =
    std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t, std::uint64_t, std::string>;

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

py::class_<PyPool> bind_pools(py::module_& m, py::class_<PyConnector>& connector) {
  connector
      // Pools. `owners` (the memory's Python objects) stay alive until the pool let go of it.
      .def(
          "register_pool",
          [](PyConnector& c, const std::vector<RegionSpec>& specs, const std::string& name,
             bool remote_read, bool remote_write, std::size_t max_queued, py::object owners,
             std::size_t max_grants, const std::map<std::string, std::size_t>& budgets) {
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
            options.max_request_grants = max_grants;
            // The queue's shares (PoolOptions), by their C++ names.
            const std::map<std::string_view, std::size_t memwire::PoolOptions::*> shares = {
                {"max_queued_per_peer", &memwire::PoolOptions::max_queued_per_peer},
                {"max_queued_shared", &memwire::PoolOptions::max_queued_shared},
                {"max_queued_per_connection", &memwire::PoolOptions::max_queued_per_connection},
                {"max_queued_shared_reads", &memwire::PoolOptions::max_queued_shared_reads}};
            for (const auto& [name, value] : budgets) {
              const auto share = shares.find(name);
              if (share == shares.end())
                throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                                     "no pool budget named '" + name + "'");
              options.*(share->second) = value;
            }
            auto pool = without_gil(
                [&] { return c.get().register_pool(std::move(regions), std::move(options)); });
            return new PyPool(std::move(pool), c.shared(), std::move(owners));
          },
          py::arg("regions"), py::arg("name") = "", py::arg("remote_read") = true,
          py::arg("remote_write") = true, py::arg("max_queued") = 65536,
          py::arg("owners") = py::none(), py::arg("max_request_grants") = 4096,
          py::arg("budgets") = std::map<std::string, std::size_t>{})
      .def(
          "read_blocks",
          [](PyConnector& c, const PoolMeta& remote, const std::vector<PairSpec>& pairs,
             PyPool& local, const std::string& tag, const std::optional<SliceSpec>& slice,
             std::shared_ptr<Notifier> notifier, std::uint64_t token, py::object owners) {
            auto blocks = block_pairs(pairs);
            return start_blocks(
                c, local, std::move(owners), notifier, token, [&](memwire::Pool& pool) {
                  return slice ? c.get().read_blocks(remote.value, blocks, pool,
                                                     block_slice(*slice), tag)
                               : c.get().read_blocks(remote.value, blocks, pool, tag);
                });
          },
          py::arg("remote"), py::arg("pairs"), py::arg("local"), py::arg("tag") = "",
          py::arg("slice") = py::none(), py::arg("notifier") = nullptr, py::arg("token") = 0,
          py::arg("owners") = py::none())
      .def(
          "write_blocks",
          [](PyConnector& c, PyPool& local, const std::vector<PairSpec>& pairs,
             const PoolMeta& remote, const std::string& tag, const std::optional<SliceSpec>& slice,
             std::shared_ptr<Notifier> notifier, std::uint64_t token, py::object owners) {
            auto blocks = block_pairs(pairs);
            return start_blocks(
                c, local, std::move(owners), notifier, token, [&](memwire::Pool& pool) {
                  return slice ? c.get().write_blocks(pool, blocks, remote.value,
                                                      block_slice(*slice), tag)
                               : c.get().write_blocks(pool, blocks, remote.value, tag);
                });
          },
          py::arg("local"), py::arg("pairs"), py::arg("remote"), py::arg("tag") = "",
          py::arg("slice") = py::none(), py::arg("notifier") = nullptr, py::arg("token") = 0,
          py::arg("owners") = py::none());

  py::class_<PoolMeta>(m, "PoolMetadata")
      .def_static("from_json", &parse_pool_metadata)
      .def("to_json", [](const PoolMeta& self) { return self.value.to_json(); })
      .def("fields", [](const PoolMeta& self) { return pool_metadata_fields(self.value); })
      .def("__eq__", [](const PoolMeta& a, const PoolMeta& b) { return a.value == b.value; });

  return py::class_<PyPool>(m, "Pool")
      .def("metadata", &PyPool::metadata)
      .def("metadata_for", &PyPool::metadata_for)
      .def("revoke", &PyPool::revoke)
      .def("peer_faults", &PyPool::peer_faults)
      .def("refusals", &PyPool::refusals)
      .def("block_count", &PyPool::block_count)
      .def("queued", &PyPool::queued)
      .def_property_readonly("fd", &PyPool::fd)
      .def("drain", &PyPool::drain)
      .def("next", &PyPool::next)
      .def("wait_for_tag", &PyPool::wait_for_tag)
      .def("try_next", &PyPool::try_next)
      .def("try_tag", &PyPool::try_tag)
      .def("close", &PyPool::close, py::arg("reason") = "")
      .def_property_readonly("closed", &PyPool::closed);
}

}  // namespace memwire_python
