#pragma once

// The parts of the module _memwire, each bound by its own file; module.cpp calls them in order.
// Every file that binds includes this, so that all of them convert std types (stl.h,
// functional.h) the same way.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "connector.hpp"

namespace memwire_python {

// Descriptors, metadata, one-shot operations, the Notifier and the Connector; returns the
// Connector's class for the parts that add methods to it.
py::class_<PyConnector> bind_operations(py::module_& m);
class PyPool;
// Pools: the Connector's pool methods, pool metadata and the Pool; returns the Pool's class.
py::class_<PyPool> bind_pools(py::module_& m, py::class_<PyConnector>& connector);
// Request grants: Pool.grant and BlockGrant.
void bind_grants(py::module_& m, py::class_<PyPool>& pool);
// Layer streams: LayerSender, LayerReceiver, layer_tag.
void bind_layers(py::module_& m);
// Channels (HTTP, NATS), their calls for event loops and the embedded HTTP endpoint.
void bind_channels(py::module_& m);
// Workers: publish, serve and request over a channel, with leases and subscriptions.
void bind_workers(py::module_& m);

}  // namespace memwire_python
