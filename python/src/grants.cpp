// Request grants: Pool.grant and the BlockGrant it returns (python/memwire/grant.py wraps it).
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "grant.hpp"
#include "pool.hpp"

namespace memwire_python {

void bind_grants(py::module_& m, py::class_<PyPool>& pool) {
  pool.def(
      "grant",
      [](PyPool& p, const std::string& peer, const std::string& request,
         const std::vector<std::uint64_t>& blocks, int access, std::int64_t lease_ms,
         std::int64_t max_lease_ms) {
        if (access < 1 || access > 3)
          throw memwire::Error(memwire::ErrorCode::InvalidArgument, "access is 1, 2 or 3");
        auto held = p.shared();
        return new PyGrant(without_gil([&] {
          return held->grant(peer, request, blocks, static_cast<memwire::Access>(access),
                             milliseconds(lease_ms), milliseconds(max_lease_ms));
        }));
      },
      py::arg("peer"), py::arg("request"), py::arg("blocks"), py::arg("access"),
      py::arg("lease_ms"), py::arg("max_lease_ms") = 0);

  py::class_<PyGrant>(m, "BlockGrant")
      // A copy: a reference would keep the grant alive as long as its metadata.
      .def_property_readonly("metadata", [](const PyGrant& g) { return PoolMeta{g.metadata()}; })
      .def_property_readonly("peer", [](const PyGrant& g) { return py::bytes(g.peer()); })
      .def_property_readonly("request", [](const PyGrant& g) { return py::bytes(g.request()); })
      .def_property_readonly("expires_in", &PyGrant::expires_in)
      .def_property_readonly("closed", &PyGrant::closed)
      .def_property_readonly("held_by_receiver", &PyGrant::held_by_receiver)
      .def_property_readonly("renew_limit_in", &PyGrant::renew_limit_in)
      .def("renew", &PyGrant::renew, py::arg("extension_ms"))
      .def("close", &PyGrant::close, py::arg("reason") = "")
      .def("expired", &PyGrant::expired);
}

}  // namespace memwire_python
