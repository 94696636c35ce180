#include "sideband/conformance/channel_world.hpp"

#include <stdexcept>
#include <thread>
#include <vector>

#include "memwire/sideband/config.hpp"

#if MEMWIRE_HAVE_HTTP
#include <httplib.h>

#include "memwire/sideband/http.hpp"
#endif
#if MEMWIRE_HAVE_NATS
#include <nats/nats.h>

#include "memwire/sideband/nats.hpp"
#include "support/nats_server.hpp"
#endif

namespace memwire::sideband::conformance {
namespace {

using namespace std::chrono_literals;

#if MEMWIRE_HAVE_HTTP
HttpChannelOptions http_client_of(const std::string& url) {
  HttpChannelOptions options;
  options.url = url;
  return options;
}

// A real HTTP server that answers every GET of `name` (operation or pool) with `document`.
class StoredDocumentServer {
 public:
  StoredDocumentServer(std::string name, std::string document) {
    auto answer = [name = std::move(name), document = std::move(document)](
                      const httplib::Request& request, httplib::Response& response) {
      if (request.matches[1] == name)
        response.set_content(document, "application/json");
      else
        response.status = 404;
    };
    server_.Get(R"(/v1/metadata/(.+))", answer);
    server_.Get(R"(/v1/pools/(.+))", answer);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~StoredDocumentServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

class HttpWorld final : public ChannelWorld {
 public:
  HttpWorld() : endpoint_(endpoint_options()) { endpoint_.start(); }
  std::unique_ptr<Channel> connect() override {
    return std::make_unique<HttpChannel>(http_client_of(endpoint_.url()));
  }
  std::unique_ptr<Channel> connect_with_stored(const std::string& name,
                                               const std::string& document) override {
    // Kept by the world, which outlives the test's clients: a server stops after their
    // kept-alive connections closed.
    stand_ins_.push_back(std::make_unique<StoredDocumentServer>(name, document));
    return std::make_unique<HttpChannel>(http_client_of(stand_ins_.back()->url()));
  }
  std::chrono::milliseconds abandon_bound() const override { return 3s; }

 private:
  static HttpEndpointOptions endpoint_options() {
    HttpEndpointOptions options;
    options.ttl_sweep_interval = 20ms;
    options.threads = 256;  // a hundred long polls at once
    return options;
  }
  HttpEndpoint endpoint_;
  std::vector<std::unique_ptr<StoredDocumentServer>> stand_ins_;
};
#endif

#if MEMWIRE_HAVE_NATS
class NatsWorld final : public ChannelWorld {
 public:
  std::unique_ptr<Channel> connect() override { return std::make_unique<NatsChannel>(options()); }
  std::unique_ptr<Channel> connect_with_stored(const std::string& name,
                                               const std::string& document) override {
    auto channel = connect();  // makes the bucket
    // As it is, with no envelope, under the operation's key and the pool's.
    for (const auto& key : {name, "=pool." + name}) put_raw(key, document);
    return channel;
  }
  std::chrono::milliseconds abandon_bound() const override { return 1s; }

 private:
  NatsOptions options() const {
    NatsOptions options;
    options.servers = {server_.url()};
    options.reconnect_wait = 50ms;
    return options;
  }
  // With nats.c alone, as a foreign tool would: no memwire code in between.
  void put_raw(const std::string& key, const std::string& value) {
    natsConnection* connection = nullptr;
    if (natsConnection_ConnectTo(&connection, server_.url().c_str()) != NATS_OK)
      throw std::runtime_error("no connection to " + server_.url());
    jsCtx* js = nullptr;
    kvStore* kv = nullptr;
    uint64_t revision = 0;
    const bool stored = natsConnection_JetStream(&js, connection, nullptr) == NATS_OK &&
                        js_KeyValue(&kv, js, "memwire") == NATS_OK &&
                        kvStore_PutString(&revision, kv, key.c_str(), value.c_str()) == NATS_OK;
    if (kv) kvStore_Destroy(kv);
    jsCtx_Destroy(js);
    natsConnection_Destroy(connection);
    if (!stored) throw std::runtime_error("could not store " + key);
  }
  test_support::NatsServer server_;
};
#endif

}  // namespace

std::unique_ptr<ChannelWorld> make_channel_world(const std::string& channel) {
#if MEMWIRE_HAVE_HTTP
  if (channel == "http") return std::make_unique<HttpWorld>();
#endif
#if MEMWIRE_HAVE_NATS
  if (channel == "nats") return std::make_unique<NatsWorld>();
#endif
  throw std::invalid_argument("no channel " + channel + " in this build");
}

}  // namespace memwire::sideband::conformance
