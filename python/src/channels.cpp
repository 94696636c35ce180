// Channels: by-name publish, fetch, wait, list and request over HTTP or NATS, blocking or as
// calls for an event loop; the HTTP endpoint embedded in this process.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "channel.hpp"
#include "memwire/sideband/http.hpp"
#include "memwire/sideband/nats.hpp"

namespace memwire_python {
namespace {

// The HTTP endpoint embedded in this process (its server threads are this process's).
class PyHttpEndpoint {
 public:
  explicit PyHttpEndpoint(memwire::sideband::HttpEndpointOptions options)
      : endpoint_(std::make_unique<memwire::sideband::HttpEndpoint>(std::move(options))) {}
  ~PyHttpEndpoint() { end_native(endpoint_, birth_); }
  PyHttpEndpoint(const PyHttpEndpoint&) = delete;
  PyHttpEndpoint& operator=(const PyHttpEndpoint&) = delete;
  memwire::sideband::HttpEndpoint& get() {
    if (birth_.inherited())
      throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                           "this HttpEndpoint was made before fork() and belongs to the parent");
    return *endpoint_;
  }

 private:
  ForkBirth birth_;
  std::unique_ptr<memwire::sideband::HttpEndpoint> endpoint_;
};

}  // namespace

void bind_channels(py::module_& m) {
  py::class_<PyChannel>(m, "Channel")
      .def("publish",
           [](PyChannel& c, const std::string& name, const Metadata& md, std::int64_t ttl_ms) {
             without_gil([&] {
               c.get().publish(name, md.value, milliseconds(ttl_ms));
               return 0;
             });
           })
      .def("fetch",
           [](PyChannel& c, const std::string& name, std::int64_t timeout_ms) {
             return without_gil(
                 [&] { return Metadata{c.get().fetch(name, milliseconds(timeout_ms))}; });
           })
      .def("wait_for",
           [](PyChannel& c, const std::string& name, std::int64_t timeout_ms) {
             return without_gil(
                 [&] { return Metadata{c.get().wait_for(name, milliseconds(timeout_ms))}; });
           })
      .def("withdraw",
           [](PyChannel& c, const std::string& name) {
             without_gil([&] {
               c.get().withdraw(name);
               return 0;
             });
           })
      .def("list", [](PyChannel& c) { return without_gil([&] { return c.get().list(); }); })
      // start_*: the same calls on the channel's own threads, for an event loop (notifier,
      // token); the returned Call gives the outcome, or stops the call when cancelled.
      .def("start_fetch",
           [](PyChannel& c, std::string name, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, timeout_ms](std::stop_token) -> PyCall::Outcome {
                   return Metadata{channel->fetch(name, milliseconds(timeout_ms))};
                 },
                 std::move(notifier), token);
           })
      .def("start_wait_for",
           [](PyChannel& c, std::string name, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, timeout_ms](std::stop_token stop) -> PyCall::Outcome {
                   return Metadata{channel->wait_for(name, milliseconds(timeout_ms), stop)};
                 },
                 std::move(notifier), token);
           })
      .def("start_publish",
           [](PyChannel& c, std::string name, const Metadata& md, std::int64_t ttl_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, md, ttl_ms](std::stop_token) -> PyCall::Outcome {
                   channel->publish(name, md.value, milliseconds(ttl_ms));
                   return {};
                 },
                 std::move(notifier), token);
           })
      .def("start_withdraw",
           [](PyChannel& c, std::string name, std::shared_ptr<Notifier> notifier,
              std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name](std::stop_token) -> PyCall::Outcome {
                   channel->withdraw(name);
                   return {};
                 },
                 std::move(notifier), token);
           })
      // Pools' metadata by name (a namespace of their own; Channel::publish_pool, ...).
      .def("start_publish_pool",
           [](PyChannel& c, std::string name, const PoolMeta& md, std::int64_t ttl_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, md, ttl_ms](std::stop_token) -> PyCall::Outcome {
                   channel->publish_pool(name, md.value, milliseconds(ttl_ms));
                   return {};
                 },
                 std::move(notifier), token);
           })
      .def("start_fetch_pool",
           [](PyChannel& c, std::string name, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, timeout_ms](std::stop_token) -> PyCall::Outcome {
                   return PoolMeta{channel->fetch_pool(name, milliseconds(timeout_ms))};
                 },
                 std::move(notifier), token);
           })
      .def("start_wait_for_pool",
           [](PyChannel& c, std::string name, std::int64_t timeout_ms,
              std::shared_ptr<Notifier> notifier, std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name, timeout_ms](std::stop_token stop) -> PyCall::Outcome {
                   return PoolMeta{channel->wait_for_pool(name, milliseconds(timeout_ms), stop)};
                 },
                 std::move(notifier), token);
           })
      .def("start_withdraw_pool",
           [](PyChannel& c, std::string name, std::shared_ptr<Notifier> notifier,
              std::uint64_t token) {
             return start_call(
                 *c.runner(),
                 [channel = c.shared(), name](std::stop_token) -> PyCall::Outcome {
                   channel->withdraw_pool(name);
                   return {};
                 },
                 std::move(notifier), token);
           })
      .def("start_list", [](PyChannel& c, std::shared_ptr<Notifier> notifier, std::uint64_t token) {
        return start_call(
            *c.runner(),
            [channel = c.shared()](std::stop_token) -> PyCall::Outcome { return channel->list(); },
            std::move(notifier), token);
      });

  py::class_<PyCall, std::shared_ptr<PyCall>>(m, "Call")
      .def("cancel", &PyCall::cancel)
      .def("result", [](PyCall& call) -> py::object {
        auto [outcome, error] = call.take();
        if (error) std::rethrow_exception(error);
        if (auto* md = std::get_if<Metadata>(&outcome)) return py::cast(std::move(*md));
        if (auto* pool = std::get_if<PoolMeta>(&outcome)) return py::cast(std::move(*pool));
        if (auto* names = std::get_if<std::vector<std::string>>(&outcome))
          return py::cast(std::move(*names));
        return py::none();
      });

  // Options come as a dict of the C++ option names (the Python classes build it), so that a new
  // option is one line here and one keyword there.
  m.def("http_channel", [](const py::dict& given, std::size_t max_calls) {
    memwire::sideband::HttpChannelOptions options;
    for (auto [key, value] : given) {
      const auto name = key.cast<std::string>();
      if (name == "url")
        options.url = value.cast<std::string>();
      else if (name == "token")
        options.token = value.cast<std::string>();
      else if (name == "user")
        options.user = value.cast<std::string>();
      else if (name == "password")
        options.password = value.cast<std::string>();
      else if (name == "ca_file")
        options.ca_file = value.cast<std::string>();
      else if (name == "verify_peer")
        options.verify_peer = value.cast<bool>();
      else if (name == "connect_timeout_ms")
        options.connect_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "request_timeout_ms")
        options.request_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "max_retries")
        options.max_retries = value.cast<int>();
      else if (name == "max_reply_size")
        options.max_reply_size = value.cast<std::size_t>();
      else
        throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                             "unknown HttpChannel option " + name);
    }
    return new PyChannel(std::make_shared<memwire::sideband::HttpChannel>(options), max_calls);
  });

  m.def("nats_channel", [](const py::dict& given, std::size_t max_calls) {
    memwire::sideband::NatsOptions options;
    auto text = [](py::handle value) { return value.cast<std::string>(); };
    for (auto [key, value] : given) {
      const auto name = key.cast<std::string>();
      if (name == "servers")
        options.servers = value.cast<std::vector<std::string>>();
      else if (name == "connection_name")
        options.connection_name = text(value);
      else if (name == "user")
        options.user = text(value);
      else if (name == "password")
        options.password = text(value);
      else if (name == "token")
        options.token = text(value);
      else if (name == "nkey_public")
        options.nkey_public = text(value);
      else if (name == "nkey_seed_file")
        options.nkey_seed_file = text(value);
      else if (name == "creds_file")
        options.creds_file = text(value);
      else if (name == "tls")
        options.tls = value.cast<bool>();
      else if (name == "ca_file")
        options.ca_file = text(value);
      else if (name == "cert_file")
        options.cert_file = text(value);
      else if (name == "key_file")
        options.key_file = text(value);
      else if (name == "subject_prefix")
        options.subject_prefix = text(value);
      else if (name == "kv_bucket")
        options.kv_bucket = text(value);
      else if (name == "inbox_prefix")
        options.inbox_prefix = text(value);
      else if (name == "kv_replicas")
        options.kv_replicas = value.cast<int>();
      else if (name == "kv_max_age_ms")
        options.kv_max_age = milliseconds(value.cast<std::int64_t>());
      else if (name == "connect_timeout_ms")
        options.connect_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "request_timeout_ms")
        options.request_timeout = milliseconds(value.cast<std::int64_t>());
      else if (name == "max_reconnect")
        options.max_reconnect = value.cast<int>();
      else
        throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                             "unknown NatsChannel option " + name);
    }
    // Warnings about the registry's buckets go to stderr, as the memwire programs write them.
    options.log = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
    return new PyChannel(
        without_gil([&] { return std::make_shared<memwire::sideband::NatsChannel>(options); }),
        max_calls);
  });

  py::class_<PyHttpEndpoint>(m, "HttpEndpoint")
      .def(py::init([](const std::string& bind_address, int port, const std::string& token) {
             memwire::sideband::HttpEndpointOptions options;
             options.bind_address = bind_address;
             options.port = static_cast<std::uint16_t>(port);
             options.token = token;
             return new PyHttpEndpoint(options);
           }),
           py::arg("bind_address") = "127.0.0.1", py::arg("port") = 0, py::arg("token") = "")
      .def("start",
           [](PyHttpEndpoint& e) {
             auto& endpoint = e.get();
             without_gil([&] {
               endpoint.start();
               return 0;
             });
           })
      .def("stop",
           [](PyHttpEndpoint& e) {
             auto& endpoint = e.get();
             without_gil([&] {
               endpoint.stop();
               return 0;
             });
           })
      .def_property_readonly("port", [](PyHttpEndpoint& e) { return e.get().port(); })
      .def_property_readonly("url", [](PyHttpEndpoint& e) { return e.get().url(); });
}

}  // namespace memwire_python
