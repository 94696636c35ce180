// Baseline: raw nats.c, no memwire. Request/reply to an async subscriber that answers with the
// same bytes a memwire publisher answers with, and a JetStream KV get of those bytes. Both
// connections send as soon as possible (natsOptions_SetSendAsap), as memwire's do.
//
//   nats_request_raw [--nats URL] [--iterations 2000]
//
// Without --nats it starts a private nats-server (JetStream, temporary store) on loopback.
// Prints one line per path and, on its last line, the same as JSON (microseconds).
#include <nats/nats.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "bench_support.hpp"
#include "sample_metadata.hpp"
#include "support/nats_server.hpp"

namespace {

using namespace memwire::bench;

template <class T, void (*Destroy)(T*)>
struct Deleter {
  void operator()(T* handle) const { Destroy(handle); }
};
template <class T, void (*Destroy)(T*)>
using Handle = std::unique_ptr<T, Deleter<T, Destroy>>;
using Options = Handle<natsOptions, natsOptions_Destroy>;
using Connection = Handle<natsConnection, natsConnection_Destroy>;
using Subscription = Handle<natsSubscription, natsSubscription_Destroy>;
using Message = Handle<natsMsg, natsMsg_Destroy>;
using JetStream = Handle<jsCtx, jsCtx_Destroy>;
using KeyValue = Handle<kvStore, kvStore_Destroy>;
using Entry = Handle<kvEntry, kvEntry_Destroy>;

void check(natsStatus status, const char* what) {
  if (status != NATS_OK) {
    throw std::runtime_error(std::string(what) + ": " + natsStatus_GetText(status) + " " +
                             nats_GetLastError(nullptr));
  }
}

Connection connect(const std::string& url) {
  natsOptions* raw_options = nullptr;
  check(natsOptions_Create(&raw_options), "options");
  Options options(raw_options);
  check(natsOptions_SetURL(options.get(), url.c_str()), "url");
  check(natsOptions_SetSendAsap(options.get(), true), "send asap");
  natsConnection* raw = nullptr;
  check(natsConnection_Connect(&raw, options.get()), "connect");
  return Connection(raw);
}

// The responder: answers every request with the payload, from nats.c's delivery thread.
void answer(natsConnection* connection, natsSubscription*, natsMsg* raw, void* closure) {
  Message message(raw);
  const auto* payload = static_cast<const std::string*>(closure);
  if (const char* reply = natsMsg_GetReply(message.get())) {
    natsConnection_Publish(connection, reply, payload->data(), static_cast<int>(payload->size()));
  }
}

nlohmann::json to_json(const Summary& s) {
  return {{"p50_us", s.median}, {"p90_us", s.p90}, {"p99_us", s.p99},
          {"min_us", s.min},    {"max_us", s.max}, {"samples", s.count}};
}

void run(LatencyOptions& given) {
  const int iterations = given.iterations;
  auto& url = given.nats_url;
  const auto server = memwire::test_support::private_server_unless_given(url);
  // The bytes memwire's publisher replies with: its entry around the metadata.
  const std::string payload =
      R"({"expires_at_ms":0,"metadata":)" + sample_metadata().to_json() + "}";
  nlohmann::json report;
  {
    Connection responder = connect(url);
    Connection requester = connect(url);
    natsSubscription* raw_subscription = nullptr;
    check(natsConnection_Subscribe(&raw_subscription, responder.get(), "bench.raw.md", answer,
                                   const_cast<std::string*>(&payload)),
          "subscribe");
    Subscription subscription(raw_subscription);
    check(natsConnection_Flush(responder.get()), "flush");
    const auto request = latency_us(iterations, iterations / 10 + 1, [&] {
      natsMsg* raw = nullptr;
      check(natsConnection_Request(&raw, requester.get(), "bench.raw.md", "", 0, 2000), "request");
      Message reply(raw);
    });
    std::printf("raw nats request/reply  p50 %7.1f us  p99 %7.1f us  (%zu B reply)\n",
                request.median, request.p99, payload.size());

    jsCtx* raw_js = nullptr;
    check(natsConnection_JetStream(&raw_js, requester.get(), nullptr), "jetstream");
    JetStream js(raw_js);
    kvConfig config;
    kvConfig_Init(&config);
    config.Bucket = "bench_raw";
    kvStore* raw_kv = nullptr;
    check(js_CreateKeyValue(&raw_kv, js.get(), &config), "create kv");
    KeyValue kv(raw_kv);
    check(kvStore_Put(nullptr, kv.get(), "bench.raw", payload.data(),
                      static_cast<int>(payload.size())),
          "kv put");
    const auto get = latency_us(iterations, iterations / 10 + 1, [&] {
      kvEntry* raw = nullptr;
      check(kvStore_Get(&raw, kv.get(), "bench.raw"), "kv get");
      Entry entry(raw);
    });
    std::printf("raw nats kv get         p50 %7.1f us  p99 %7.1f us\n", get.median, get.p99);
    kv.reset();
    js_DeleteKeyValue(js.get(), "bench_raw");
    report = {{"payload_bytes", payload.size()},
              {"request_reply", to_json(request)},
              {"kv_get", to_json(get)}};
  }
  std::printf("%s\n", nlohmann::json{{"nats_raw", report}}.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) { return latency_main(argc, argv, "nats_request_raw", true, run); }
