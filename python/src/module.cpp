// memwire._memwire: the native half of the Python package. Thin over the C++ API; the
// nixl_connect-shaped surface (async operations, Descriptor, enums) is Python (memwire/*.py).
// This file makes the module and binds errors and devices; the other parts are bound by the
// files bindings.hpp names (operations, pools, grants, layers, channels, workers), in that order.
//
// Threads and the GIL:
// - Every call into memwire that may block or take a lock runs with the GIL released, so a
//   memwire thread that needs the GIL (a completion callback) never waits on one that holds it.
// - Completion reaches Python through Operation::on_complete: the callback, on whatever thread
//   finishes the operation, takes the GIL and calls a Python callable (which hands the status
//   to the event loop with call_soon_threadsafe). Once the interpreter starts shutting down
//   (atexit), callbacks no longer touch Python at all: see PythonGate.
// - A Python object held by a C++ callback is always released with the GIL held: Signal hands
//   it over exactly once, either to the callback or to the owning wrapper's destructor.
// - A pool's notifications (tags) stay in memwire::Pool's own queue, which never takes the GIL:
//   blocking waits sleep in Pool::wait_for_tag and friends (GIL released), an event loop
//   watches Pool::notification_fd and takes notifications (try_...) on the loop's own thread.
#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "host_memory.hpp"
#include "interpreter.hpp"
#include "memwire/memwire.hpp"
#include "pool.hpp"

namespace py = pybind11;
using memwire_python::PythonGate;

namespace {

// memwire.errors.by_code: ErrorCode value -> exception class. A new reference, kept for the
// process's life (never released, so no destructor runs after the interpreter is gone).
PyObject* error_classes = nullptr;

PyObject* error_class(memwire::ErrorCode code) {
  if (error_classes == nullptr) {
    auto module = py::module_::import("memwire.errors");
    error_classes = module.attr("by_code").ptr();
    Py_INCREF(error_classes);
  }
  PyObject* key = PyLong_FromLong(static_cast<long>(code));
  PyObject* found = PyDict_GetItem(error_classes, key);  // borrowed
  Py_DECREF(key);
  return found != nullptr ? found : PyExc_RuntimeError;
}

void raise_error(const memwire::Error& error) {
  PyErr_SetString(error_class(error.code()), error.what());
}

// InvalidMetadataError with MetadataError's place as data: .field (None for text that is wrong
// as a whole) and .reason, as in C++.
void raise_metadata_error(const memwire::MetadataError& error) {
  auto type = py::reinterpret_borrow<py::object>(error_class(error.code()));
  auto instance = type(error.what());
  instance.attr("field") =
      error.field().empty() ? py::object(py::none()) : py::object(py::str(error.field()));
  instance.attr("reason") = py::str(error.reason());
  PyErr_SetObject(type.ptr(), instance.ptr());
}

}  // namespace

PYBIND11_MODULE(_memwire, m) {
  m.doc() = "memwire's native core; use the `memwire` package";

  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const memwire::MetadataError& e) {
      raise_metadata_error(e);
    } catch (const memwire::Error& e) {
      raise_error(e);
    }
  });

  // Closed from memwire/__init__.py's atexit hook, before finalization begins.
  m.def("_close_python_gate", [] { PythonGate::close(); });
  m.def("_python_gate_open", [] { return PythonGate::open(); });

  m.def(
      "parse_device",
      [](const std::string& text) {
        auto device = memwire::Device::parse(text);
        return std::make_pair(static_cast<int>(device.kind()), device.id());
      },
      "(kind, id) of a device string: cpu/host, cuda[:N]/gpu[:N]");
  m.def("cuda_device_count", &memwire::cuda_device_count,
        "CUDA devices the driver sees (memwire::cuda_device_count: 0 without one)");
  m.def(
      "host_memory_access",
      [](std::uintptr_t address, std::size_t size) {
        return static_cast<int>(memwire_python::host_memory_access(address, size));
      },
      "0: not all mapped readable, 1: readable, 2: readable and writable");
  m.def("error_code_name", [](int code) {
    return std::string(memwire::to_string(static_cast<memwire::ErrorCode>(code)));
  });

  auto connector = memwire_python::bind_operations(m);
  auto pool = memwire_python::bind_pools(m, connector);
  memwire_python::bind_grants(m, pool);
  memwire_python::bind_layers(m);
  memwire_python::bind_channels(m);
  memwire_python::bind_workers(m);
}
