#include <algorithm>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <thread>

#include "channel_rules.hpp"
#include "http/client/curl_client.hpp"
#include "memwire/error_codes.hpp"
#include "memwire/sideband/http.hpp"

namespace memwire::sideband {

using namespace channel_rules;  // the checks and words every channel shares

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

// Slack on top of a long poll's wait so that the server's own "not yet" (504) usually arrives
// first; either way the caller sees Error{Timeout} close to its deadline.
constexpr milliseconds kPollSlack{250};
// A serve() poller's long poll, and how long past it a silent endpoint is given.
constexpr milliseconds kServePoll{20000};
constexpr milliseconds kServePollSlack{5000};

std::string server_message(const http::HttpReply& reply) {
  auto body = json::parse(reply.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_string()) {
    return body["error"].get<std::string>();
  }
  return "HTTP " + std::to_string(reply.status);
}

// Maps the endpoint's statuses onto memwire's errors.
[[noreturn]] void fail(const http::HttpReply& reply, const std::string& what) {
  auto message = what + ": " + server_message(reply);
  switch (reply.status) {
    case 404:
      throw Error(ErrorCode::NotFound, message);
    case 401:
    case 403:
      throw Error(ErrorCode::AccessDenied, message);
    case 400:
      throw Error(ErrorCode::InvalidMetadata, message);
    case 408:
    case 504:
      throw Error(ErrorCode::Timeout, message);
    default:
      throw Error(ErrorCode::Transport, message + " (HTTP " + std::to_string(reply.status) + ")");
  }
}

bool succeeded(const http::HttpReply& reply) { return reply.status >= 200 && reply.status < 300; }

// Returns for 2xx. The message is built only on failure, to keep it off every fetch's path.
void check(const http::HttpReply& reply, std::string_view what) {
  if (!succeeded(reply)) fail(reply, std::string(what));
}

// As above, for "<verb> '<name>'".
void check(const http::HttpReply& reply, std::string_view verb, std::string_view name) {
  if (!succeeded(reply)) fail(reply, std::string(verb) + " '" + std::string(name) + "'");
}

std::string path_of(std::string_view name) { return "/v1/metadata/" + std::string(name); }
std::string pool_path_of(std::string_view name) { return "/v1/pools/" + std::string(name); }

// What a channel and its serve() subscriptions share; they may outlive each other.
struct ChannelCore {
  explicit ChannelCore(HttpChannelOptions options_in)
      : options(std::move(options_in)), client(options) {}
  HttpChannelOptions options;
  http::CurlClient client;
};

// One serve(): a server registered at the endpoint and `concurrency` long-pollers answering
// its requests. Re-registers when the endpoint forgets it (restarted or swept).
class HttpServeSubscription final : public Subscription {
 public:
  HttpServeSubscription(std::shared_ptr<ChannelCore> channel, std::string prefix,
                        Channel::RequestHandler handler)
      : channel_(std::move(channel)), prefix_(std::move(prefix)), handler_(std::move(handler)) {
    server_id_ = register_server();  // errors (refused token, no endpoint) reach the caller
    auto count = std::max(1u, channel_->options.serve_concurrency);
    for (unsigned i = 0; i < count; ++i) pollers_.emplace_back([this] { poll_loop(); });
  }

  ~HttpServeSubscription() override {
    std::string id;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      id = server_id_;
    }
    wake_.notify_all();
    // Unregistering ends the pollers' long polls at once.
    try {
      check(
          client().perform({"DELETE", "/v1/servers/" + id, {}, channel_->options.connect_timeout}),
          "unregister");
    } catch (const std::exception&) {
      // The endpoint is gone or forgot us already: the pollers find out by themselves.
    }
    for (auto& poller : pollers_) poller.join();
  }

 private:
  http::CurlClient& client() { return channel_->client; }

  std::string register_server() {
    auto reply = client().perform({"POST", "/v1/servers", json{{"prefix", prefix_}}.dump(),
                                   channel_->options.request_timeout});
    check(reply, "serve", prefix_);
    auto body = json::parse(reply.body, nullptr, false);
    if (!body.is_object() || !body.contains("id") || !body["id"].is_string()) {
      throw Error(ErrorCode::Protocol, "serve: the endpoint answered without a server id");
    }
    return body["id"].get<std::string>();
  }

  // After the endpoint forgot `stale`: registers again, once for all pollers.
  void reregister(const std::string& stale) {
    std::lock_guard lock(mutex_);
    if (stopping_ || server_id_ != stale) return;
    server_id_ = register_server();
  }

  void answer(const json& request) {
    auto id = request.at("id").get<std::string>();
    auto name = request.at("name").get<std::string>();
    json result{{"status", "done"}};
    try {
      handler_(name, metadata_under(name, request.at("metadata").get<std::string>()));
    } catch (const Error& e) {
      // to_string()'s text, as owners always sent it: older requesters know only that one.
      result = {{"status", "error"}, {"code", to_string(e.code())}, {"message", e.message()}};
    } catch (const std::exception& e) {
      result = {
          {"status", "error"}, {"code", to_string(ErrorCode::Transport)}, {"message", e.what()}};
    }
    // A 404 here means the requester gave up meanwhile: nothing left to tell.
    client().perform({"POST", "/v1/requests/" + id + "/reply", result.dump(),
                      channel_->options.request_timeout});
  }

  void poll_loop() {
    auto backoff = channel_->options.retry_backoff;
    for (;;) {
      std::string id;
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        id = server_id_;
      }
      try {
        auto reply = client().perform(
            {"GET",
             "/v1/servers/" + id + "/requests?wait_ms=" + std::to_string(kServePoll.count()),
             {},
             kServePoll + kServePollSlack});
        if (reply.status == 404) {
          reregister(id);
          continue;
        }
        check(reply, "poll for requests");
        auto body = json::parse(reply.body);
        for (const auto& request : body.at("requests")) answer(request);
        backoff = channel_->options.retry_backoff;
      } catch (const std::exception&) {
        // The endpoint is down or restarting: wait a little (or for the end), then poll again.
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, backoff, [this] { return stopping_; });
        backoff = std::min<milliseconds>(backoff * 2, milliseconds(1000));
      }
    }
  }

  std::shared_ptr<ChannelCore> channel_;
  std::string prefix_;
  Channel::RequestHandler handler_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string server_id_;
  std::vector<std::thread> pollers_;
};

}  // namespace

class HttpChannel::Impl : public ChannelCore {
 public:
  using ChannelCore::ChannelCore;

  // PUT, GET (or long poll) and DELETE of one document at `path`: operations' metadata and
  // pools' share them.
  void put(const std::string& path, std::string_view name, const std::string& document,
           std::chrono::milliseconds ttl) {
    auto target = path;
    if (ttl.count() > 0) target += "?ttl_ms=" + std::to_string(ttl.count());
    check(client.perform({"PUT", target, document, options.request_timeout}), "publish", name);
  }

  std::string get(const std::string& path, std::string_view name,
                  std::chrono::milliseconds timeout) {
    auto reply = client.perform({"GET", path, {}, timeout});
    check(reply, "fetch", name);
    return std::move(reply.body);
  }

  void remove(const std::string& path, std::string_view name) {
    auto reply = client.perform({"DELETE", path, {}, options.request_timeout});
    if (reply.status == 404) return;  // already gone: withdrawing is idempotent
    check(reply, "withdraw", name);
  }

  std::string wait(const std::string& path, std::string_view name,
                   std::chrono::milliseconds timeout, const std::stop_token& abandon) {
    const Deadline deadline(timeout);
    for (;;) {
      // One long poll per round; the endpoint caps a round's length, so long waits take several.
      const auto left = deadline.left();
      auto reply = client.perform(
          {"GET", path + "?wait_ms=" + std::to_string(left.count()), {}, left + kPollSlack},
          abandon);
      if (reply.status == 504 && !deadline.passed()) continue;
      check(reply, "wait for", name);
      return std::move(reply.body);
    }
  }
};

HttpChannel::HttpChannel(HttpChannelOptions options)
    : impl_(std::make_shared<Impl>(std::move(options))) {}
HttpChannel::~HttpChannel() = default;

void HttpChannel::publish(std::string_view name, const RdmaMetadata& metadata,
                          std::chrono::milliseconds ttl) {
  check_publish(name, ttl);
  impl_->put(path_of(name), name, metadata.to_json(), ttl);
}

RdmaMetadata HttpChannel::fetch(std::string_view name, std::chrono::milliseconds timeout) {
  check_name(name);
  return metadata_under(name, impl_->get(path_of(name), name, timeout));
}

void HttpChannel::withdraw(std::string_view name) {
  check_name(name);
  impl_->remove(path_of(name), name);
}

RdmaMetadata HttpChannel::wait_for(std::string_view name, std::chrono::milliseconds timeout,
                                   std::stop_token abandon) {
  check_name(name);
  return metadata_under(name, impl_->wait(path_of(name), name, timeout, abandon));
}

void HttpChannel::publish_pool(std::string_view name, const PoolMetadata& metadata,
                               std::chrono::milliseconds ttl) {
  impl_->put(pool_path_of(name), name, checked_pool_document(name, metadata, ttl), ttl);
}

PoolMetadata HttpChannel::fetch_pool(std::string_view name, std::chrono::milliseconds timeout) {
  check_name(name);
  return pool_metadata_under(name, impl_->get(pool_path_of(name), name, timeout));
}

PoolMetadata HttpChannel::wait_for_pool(std::string_view name, std::chrono::milliseconds timeout,
                                        std::stop_token abandon) {
  check_name(name);
  return pool_metadata_under(name, impl_->wait(pool_path_of(name), name, timeout, abandon));
}

void HttpChannel::withdraw_pool(std::string_view name) {
  check_name(name);
  impl_->remove(pool_path_of(name), name);
}

std::vector<std::string> HttpChannel::list() {
  auto reply = impl_->client.perform({"GET", "/v1/metadata", {}, impl_->options.request_timeout});
  check(reply, "list");
  auto body = json::parse(reply.body, nullptr, false);
  if (!body.is_object() || !body.contains("names") || !body["names"].is_array()) {
    throw Error(ErrorCode::Protocol, "list: unexpected answer from " + impl_->client.url());
  }
  std::vector<std::string> names;
  for (const auto& name : body["names"]) {
    if (name.is_string()) names.push_back(name.get<std::string>());
  }
  return names;
}

std::unique_ptr<Subscription> HttpChannel::serve(std::string_view prefix, RequestHandler handler) {
  check_prefix(prefix);
  if (!handler) throw Error(ErrorCode::InvalidArgument, "serve: no handler");
  return std::make_unique<HttpServeSubscription>(impl_, std::string(prefix), std::move(handler));
}

void HttpChannel::request(std::string_view name, const RdmaMetadata& writable,
                          std::chrono::milliseconds timeout, std::stop_token abandon) {
  check_request(name, writable);
  // Not idempotent: a repeated request could make the owner write twice.
  http::HttpCall call{"POST",
                      "/v1/requests/" + std::string(name) +
                          "?wait_ms=" + std::to_string(std::max<long long>(0, timeout.count())),
                      writable.to_json(), timeout + kPollSlack, false};
  auto reply = impl_->client.perform(call, std::move(abandon));
  check(reply, "request", name);
  auto body = json::parse(reply.body, nullptr, false);
  if (!body.is_object() || !body.contains("status")) {
    throw Error(ErrorCode::Protocol, "request '" + std::string(name) + "': unexpected answer");
  }
  if (body["status"] == "done") return;
  throw Error(error_code_from_name(body.value("code", "transport")),
              "owner of '" + std::string(name) + "': " + body.value("message", "failed"));
}

}  // namespace memwire::sideband
