// Descriptors, metadata and one-shot operations (create_readable/writable, begin_read/write).
#include <memory>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "operation.hpp"

namespace memwire_python {
namespace {

// A Python buffer export (numpy array, bytearray, memoryview, ...), held while a Descriptor
// needs its memory: while it lives, a bytearray cannot be resized and numpy keeps the array.
class BufferHold {
 public:
  BufferHold(py::handle object, bool writable) {
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) throw py::error_already_set();
    held_ = true;
  }
  ~BufferHold() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferHold(const BufferHold&) = delete;
  BufferHold& operator=(const BufferHold&) = delete;

  std::uintptr_t address() const { return reinterpret_cast<std::uintptr_t>(view_.buf); }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }
  bool readonly() const { return view_.readonly != 0; }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

Metadata parse_metadata(const std::string& json) {
  return {memwire::RdmaMetadata::from_json(json)};
}

py::dict metadata_fields(const memwire::RdmaMetadata& metadata) {
  py::list descriptors;
  for (const auto& d : metadata.descriptors()) {
    py::dict item;
    item["device"] = d.device.to_string();
    item["ptr"] = d.ptr;
    item["size"] = d.size;
    descriptors.append(item);
  }
  py::list transports;
  for (const auto& t : metadata.endpoint().transports) transports.append(t.name);
  py::dict fields;
  fields["descriptors"] = descriptors;
  fields["notification_key"] = metadata.notification_key();
  fields["operation_kind"] = static_cast<int>(metadata.operation_kind());
  fields["connector"] = metadata.endpoint().connector;
  fields["host"] = metadata.endpoint().host;
  fields["transports"] = transports;
  fields["expires_at_ms"] = metadata.expires_at_ms();
  return fields;
}

}  // namespace

py::class_<PyConnector> bind_operations(py::module_& m) {
  py::class_<memwire::Descriptor>(m, "NativeDescriptor")
      .def(py::init([](std::uintptr_t ptr, std::size_t size, const std::string& device) {
        return memwire::Descriptor(reinterpret_cast<void*>(ptr), size,
                                   memwire::Device::parse(device));
      }))
      .def_property_readonly(
          "ptr",
          [](const memwire::Descriptor& d) { return reinterpret_cast<std::uintptr_t>(d.ptr()); })
      .def_property_readonly("size", &memwire::Descriptor::size);

  py::class_<BufferHold>(m, "BufferHold")
      .def(py::init<py::handle, bool>(), py::arg("object"), py::arg("writable"))
      .def_property_readonly("address", &BufferHold::address)
      .def_property_readonly("size", &BufferHold::size)
      .def_property_readonly("readonly", &BufferHold::readonly);

  py::class_<Metadata>(m, "Metadata")
      .def_static("from_json", &parse_metadata)
      .def("to_json", [](const Metadata& self) { return self.value.to_json(); })
      .def("fields", [](const Metadata& self) { return metadata_fields(self.value); })
      .def("__eq__", [](const Metadata& a, const Metadata& b) { return a.value == b.value; });

  py::class_<ConnectorConfig>(m, "ConnectorConfig")
      .def(py::init<>())
      .def_readwrite("name", &ConnectorConfig::name)
      .def_readwrite("bind_address", &ConnectorConfig::bind_address)
      .def_readwrite("port", &ConnectorConfig::port)
      .def_readwrite("transports", &ConnectorConfig::transports)
      .def_readwrite("metadata_ttl_ms", &ConnectorConfig::metadata_ttl_ms)
      .def_readwrite("connect_timeout_ms", &ConnectorConfig::connect_timeout_ms)
      .def_readwrite("shm_direct_reads", &ConnectorConfig::shm_direct_reads)
      .def_readwrite("busy_poll_us", &ConnectorConfig::busy_poll_us)
      .def_readwrite("from_environment", &ConnectorConfig::from_environment);

  py::class_<PyOperation>(m, "Operation")
      .def("status", &PyOperation::status)
      .def("kind", &PyOperation::kind)
      .def("notify", &PyOperation::notify)
      .def("notify_via", &PyOperation::notify_via)
      .def("wait", &PyOperation::wait)
      .def("spin", &PyOperation::spin)
      .def("cancel", &PyOperation::cancel, py::arg("reason") = "")
      .def("close", &PyOperation::close)
      .def("transport", &PyOperation::transport)
      .def("error_message", &PyOperation::error_message)
      .def("metadata", &PyOperation::metadata)
      .def("renew", &PyOperation::renew)
      .def("check_results", &PyOperation::check_results);

  py::class_<Notifier, std::shared_ptr<Notifier>>(m, "Notifier")
      .def(py::init<>())
      .def_property_readonly("fd", &Notifier::fd)
      .def("drain", &Notifier::drain);

  py::class_<PyConnector> connector(m, "Connector");
  connector.def(py::init<const ConnectorConfig&>())
      .def_property_readonly("name", [](PyConnector& c) { return c.get().name(); })
      .def_property_readonly("hostname", [](PyConnector& c) { return c.get().hostname(); })
      .def("transports", [](PyConnector& c) { return c.get().transports(); })
      // `owners` (the Descriptor list) stays alive until the operation let go of its memory.
      .def(
          "create_readable",
          [](PyConnector& c, const Descriptors& local, py::object owners) {
            const auto& descriptors = local;
            return new PyOperation(
                without_gil([&] { return AnyOperation(c.get().create_readable(descriptors)); }),
                c.shared(), std::move(owners));
          },
          py::arg("local"), py::arg("owners") = py::none())
      .def(
          "create_writable",
          [](PyConnector& c, const Descriptors& local, py::object owners) {
            const auto& descriptors = local;
            return new PyOperation(
                without_gil([&] { return AnyOperation(c.get().create_writable(descriptors)); }),
                c.shared(), std::move(owners));
          },
          py::arg("local"), py::arg("owners") = py::none())
      // begin_* take an optional callable so that the completion is armed in the same call.
      .def(
          "begin_read",
          [](PyConnector& c, const Metadata& remote, const Descriptors& local,
             std::shared_ptr<Notifier> notifier, std::uint64_t token, py::object owners) {
            const auto& descriptors = local;
            auto* op = new PyOperation(
                without_gil(
                    [&] { return AnyOperation(c.get().begin_read(remote.value, descriptors)); }),
                c.shared(), std::move(owners));
            if (notifier) op->notify_via(notifier, token);
            return op;
          },
          py::arg("remote"), py::arg("local"), py::arg("notifier") = nullptr, py::arg("token") = 0,
          py::arg("owners") = py::none())
      .def(
          "begin_write",
          [](PyConnector& c, const Descriptors& local, const Metadata& remote,
             std::shared_ptr<Notifier> notifier, std::uint64_t token, py::object owners) {
            const auto& descriptors = local;
            auto* op = new PyOperation(
                without_gil(
                    [&] { return AnyOperation(c.get().begin_write(descriptors, remote.value)); }),
                c.shared(), std::move(owners));
            if (notifier) op->notify_via(notifier, token);
            return op;
          },
          py::arg("local"), py::arg("remote"), py::arg("notifier") = nullptr, py::arg("token") = 0,
          py::arg("owners") = py::none());
  return connector;
}

}  // namespace memwire_python
