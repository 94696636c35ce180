// Layer streams: memwire::LayerSender and LayerReceiver over the binding's pools. Their waits
// block with the GIL released; the C++ classes give no fd to hook an event loop to (asyncio
// code runs them in a thread, or awaits the layer tags on the pool itself).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "grant.hpp"
#include "pool.hpp"

namespace memwire_python {
namespace {

// The sender with what it borrows (the connector, the local pool and the pool's Python owner),
// which outlive it. As in C++, a cancel() from another thread ends a finish() in flight.
class PySender {
 public:
  PySender(PyConnector& connector, PyPool& local, py::object local_owner, const PoolMeta& remote,
           std::string stream)
      : connector_(connector.shared()), pool_(local.shared()), owner_(std::move(local_owner)) {
    sender_ = std::make_unique<memwire::LayerSender>(*connector_, *pool_, remote.value,
                                                     std::move(stream));
  }
  ~PySender() {
    end_native(sender_, birth_);  // cancels unfinished layers
    end_native(pool_, birth_);
    end_native(connector_, birth_);
  }
  PySender(const PySender&) = delete;
  PySender& operator=(const PySender&) = delete;

  void send(std::uint32_t layer, const std::vector<PairSpec>& pairs,
            const std::optional<SliceSpec>& slice) {
    auto blocks = block_pairs(pairs);
    call_without_gil([&](memwire::LayerSender& sender) {
      if (slice)
        sender.send(layer, blocks, block_slice(*slice));
      else
        sender.send(layer, blocks);
    });
  }
  void finish(std::int64_t timeout_ms) {
    call_without_gil(
        [&](memwire::LayerSender& sender) { sender.finish(milliseconds(timeout_ms)); });
  }
  void cancel(const std::string& reason) {
    call_without_gil([&](memwire::LayerSender& sender) { sender.cancel(reason); });
  }
  std::size_t layers_sent() {
    std::size_t count = 0;
    call_without_gil([&](memwire::LayerSender& sender) { count = sender.layers_sent(); });
    return count;
  }

 private:
  // Runs `work` without the GIL (the sender may wait, or take its own lock).
  template <class F>
  void call_without_gil(F work) {
    if (!sender_) throw memwire::Error(memwire::ErrorCode::InvalidArgument, "sender was closed");
    without_gil([&] {
      work(*sender_);
      return 0;
    });
  }
  ForkBirth birth_;
  std::shared_ptr<memwire::Connector> connector_;
  std::shared_ptr<memwire::Pool> pool_;
  py::object owner_;
  std::unique_ptr<memwire::LayerSender> sender_;
};

// The receiver with the pool it waits on. wait() and cancel() may run at once on different
// threads (a cancel ends the waits), as in C++.
class PyReceiver {
 public:
  PyReceiver(PyPool& pool, py::object owner, std::string stream, std::string from, int kinds)
      : pool_(pool.shared()), owner_(std::move(owner)) {
    receiver_ = std::make_unique<memwire::LayerReceiver>(*pool_, std::move(stream), std::move(from),
                                                         tag_kinds(kinds));
  }
  PyReceiver(PyPool& pool, py::object owner, PyGrant& grant, std::string stream, int kinds)
      : pool_(pool.shared()), owner_(std::move(owner)) {
    const auto which = tag_kinds(kinds);  // before the grant moves in
    receiver_ =
        std::make_unique<memwire::LayerReceiver>(*pool_, grant.take(), std::move(stream), which);
  }
  ~PyReceiver() {
    end_native(receiver_, birth_);  // closes its grant
    end_native(pool_, birth_);
  }
  PyReceiver(const PyReceiver&) = delete;
  PyReceiver& operator=(const PyReceiver&) = delete;

  void wait(std::uint32_t layer, std::int64_t timeout_ms) {
    auto& receiver = get();
    without_gil([&] {
      receiver.wait(layer, milliseconds(timeout_ms));
      return 0;
    });
  }
  void cancel(const std::string& reason) {
    auto& receiver = get();
    without_gil([&] {
      receiver.cancel(reason);
      return 0;
    });
  }
  PoolMeta grant_metadata() { return {get().grant_metadata()}; }

 private:
  memwire::LayerReceiver& get() {
    if (!receiver_)
      throw memwire::Error(memwire::ErrorCode::InvalidArgument, "receiver was closed");
    return *receiver_;
  }
  ForkBirth birth_;
  std::shared_ptr<memwire::Pool> pool_;
  py::object owner_;
  std::unique_ptr<memwire::LayerReceiver> receiver_;
};

}  // namespace

void bind_layers(py::module_& m) {
  m.def("layer_tag", [](const std::string& stream, std::uint32_t layer) {
    return py::bytes(memwire::layer_tag(stream, layer));
  });

  py::class_<PySender>(m, "LayerSender")
      .def(py::init<PyConnector&, PyPool&, py::object, const PoolMeta&, std::string>())
      .def("send", &PySender::send, py::arg("layer"), py::arg("pairs"),
           py::arg("slice") = py::none())
      .def("finish", &PySender::finish)
      .def("cancel", &PySender::cancel, py::arg("reason") = "")
      .def("layers_sent", &PySender::layers_sent);

  py::class_<PyReceiver>(m, "LayerReceiver")
      .def(py::init<PyPool&, py::object, std::string, std::string, int>())
      .def(py::init<PyPool&, py::object, PyGrant&, std::string, int>())
      .def("wait", &PyReceiver::wait)
      .def("cancel", &PyReceiver::cancel, py::arg("reason") = "")
      .def("grant_metadata", &PyReceiver::grant_metadata);
}

}  // namespace memwire_python
