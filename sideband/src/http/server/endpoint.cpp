#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>

#include "channel_rules.hpp"
#include "http/server/connection.hpp"
#include "http/server/document_kinds.hpp"
#include "http/server/metadata_store.hpp"
#include "http/server/metrics.hpp"
#include "http/server/owned_server.hpp"
#include "http/server/request_broker.hpp"
#include "http/server/request_rules.hpp"
#include "http/server/sending_bodies.hpp"
#include "http/server/token_owner.hpp"
#include "http/server/waiting_requests.hpp"
#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"
#include "memwire/sideband/http.hpp"

namespace memwire::sideband {
namespace {

using json = nlohmann::json;
using namespace http;  // the request rules (request_rules.hpp)

}  // namespace

class HttpEndpoint::Impl {
 public:
  explicit Impl(HttpEndpointOptions options)
      : options_(std::move(options)),
        store_(options_.state_file, http::MetadataStore::Load::Later) {
    if (!options_.token.empty()) {
      authorizations_.emplace_back("Bearer " + options_.token,
                                   HttpGrant{options_.token, HttpGrant::Role::Publish, ""});
    }
    for (const auto& grant : options_.grants) {
      if (grant.token.empty())
        throw Error(ErrorCode::InvalidArgument, "a grant has an empty token");
      channel_rules::check_prefix(grant.prefix);
      authorizations_.emplace_back("Bearer " + grant.token, grant);
    }
    if (options_.max_connections == 0 || options_.max_long_polls == 0 ||
        options_.max_body_size == 0 || options_.max_waiting_bytes == 0 ||
        options_.request_read_timeout.count() <= 0 || options_.keep_alive_timeout.count() <= 0 ||
        options_.send_timeout.count() <= 0 || options_.max_ttl.count() <= 0) {
      throw Error(ErrorCode::InvalidArgument, "HTTP endpoint limits must be positive");
    }
    if (options_.max_sending_bytes < options_.max_body_size) {
      throw Error(ErrorCode::InvalidArgument,
                  "max_sending_bytes must be at least max_body_size, or a stored document could "
                  "never be sent");
    }
    // Beyond these a deadline (now + timeout) could overflow the clock.
    constexpr auto kLongestTimeout = std::chrono::hours(24);
    constexpr auto kLongestTtl = std::chrono::days(3650);
    if (options_.request_read_timeout > kLongestTimeout ||
        options_.keep_alive_timeout > kLongestTimeout || options_.max_wait > kLongestTimeout ||
        options_.ttl_sweep_interval > kLongestTimeout || options_.max_ttl > kLongestTtl ||
        options_.send_timeout > kLongestTimeout || options_.max_wait.count() < 0 ||
        options_.ttl_sweep_interval.count() <= 0) {
      throw Error(ErrorCode::InvalidArgument,
                  "HTTP endpoint timeouts must be positive and at most a day (max_ttl: 10 years)");
    }
    if (options_.max_long_polls >= options_.max_connections) {
      throw Error(ErrorCode::InvalidArgument,
                  "max_long_polls must be below max_connections, or long polls can take them all");
    }
    limits_.keep_alive_timeout = options_.keep_alive_timeout;
    limits_.request_read_timeout = options_.request_read_timeout;
    limits_.send_timeout = options_.send_timeout;
    bool tls = !options_.cert_file.empty() || !options_.key_file.empty();
    if (tls) {
      if (options_.cert_file.empty() || options_.key_file.empty()) {
        throw Error(ErrorCode::InvalidArgument, "TLS needs both a certificate and a key file");
      }
      auto server = std::make_unique<OwnedServer<httplib::SSLServer>>(options_.cert_file.c_str(),
                                                                      options_.key_file.c_str());
      if (!server->is_valid()) {
        throw Error(
            ErrorCode::InvalidArgument,
            "cannot load TLS certificate " + options_.cert_file + " / key " + options_.key_file);
      }
      hooks(*server);
      ssl_context_ = server->ssl_context();
      server_ = std::move(server);
    } else {
      auto server = std::make_unique<OwnedServer<httplib::Server>>();
      hooks(*server);
      server_ = std::move(server);
    }
    scheme_ = tls ? "https" : "http";
    configure();
    if (options_.port == 0) {
      port_ = server_->bind_to_any_port(options_.bind_address);
    } else {
      port_ = server_->bind_to_port(options_.bind_address, options_.port) ? options_.port : -1;
    }
    if (port_ <= 0) {
      throw Error(ErrorCode::Transport, "cannot listen on " + options_.bind_address + ":" +
                                            std::to_string(options_.port));
    }
    widen_backlog_();
    for (const auto& [authorization, grant] : authorizations_) {
      owners_.push_back(owner_of_token(grant.token));
    }
    // Last: nothing after it may throw, or the thread would be left running. Until it is done,
    // requests that touch names wait for it; /healthz and /readyz answer at once.
    if (!store_.loaded()) loader_ = std::thread([this] { store_.load(); });
  }

  ~Impl() { stop(); }

  void start() {
    std::lock_guard lock(lifecycle_);
    if (started_ || stopped_) return;
    started_ = true;
    pool_ = std::make_unique<http::ConnectionPool>(options_.threads, options_.max_connections,
                                                   std::chrono::seconds(30));
    listener_ = std::thread([this] { server_->listen_after_bind(); });
    sweeper_ = std::thread([this] { sweep_loop(); });
  }

  void stop() {
    std::lock_guard lock(lifecycle_);
    if (stopped_) return;
    {
      std::lock_guard sweep_lock(sweep_mutex_);
      stopped_ = true;
    }
    sweep_wake_.notify_all();
    // Release long polls first: the server joins its threads when it stops.
    store_.stop();
    broker_.stop();
    close_listener_();
    if (listener_.joinable()) listener_.join();
    stop_signal_.raise();          // wakes idle connections and unfinished reads and writes
    if (pool_) pool_->shutdown();  // waits for the requests still being served
    if (sweeper_.joinable()) sweeper_.join();
    if (loader_.joinable()) loader_.join();  // store_.stop() cut it short
  }

  std::uint16_t port() const noexcept { return static_cast<std::uint16_t>(port_); }
  std::string url() const {
    auto host = options_.bind_address == "0.0.0.0" ? "127.0.0.1" : options_.bind_address;
    return scheme_ + "://" + host + ":" + std::to_string(port_);
  }
  std::size_t size() { return store_.size(); }
  bool ready() const noexcept { return store_.loaded(); }

 private:
  template <class S>
  void hooks(S& server) {
    widen_backlog_ = [&server] { server.widen_backlog(); };
    close_listener_ = [&server] { server.close_listener(); };
    server.serve_connection = [this](int fd, const ProcessRequest& process) {
      http::serve_connection(fd, process, ssl_context_, limits_, stop_signal_);
      return true;
    };
  }

  // A request body, however it is framed (length, chunks), read up to max_body_size (or
  // `limit` when that is smaller).
  std::string read_body(httplib::Response& res, const httplib::ContentReader& reader,
                        std::size_t limit = SIZE_MAX) {
    limit = std::min(limit, options_.max_body_size);
    std::string body;
    bool too_large = false;
    bool complete = reader([&](const char* data, std::size_t size) {
      if (body.size() + size > limit) {
        too_large = true;
        return false;
      }
      body.append(data, size);
      return true;
    });
    if (too_large || res.status == 413) {
      close_after_response = true;
      throw HttpStatusError(413, "the body is larger than " + std::to_string(limit) + " bytes");
    }
    if (!complete) {
      close_after_response = true;
      throw Error(ErrorCode::InvalidArgument, "the body did not arrive whole");
    }
    return body;
  }

  // One waiting request (a long poll or a request/reply call) while it waits, holding `bytes`.
  using LongPollSlot = http::WaitingRequests::Slot;

  // Long polls without ?wait_ms= wait 30 s (or max_wait when that is shorter).
  Clock::time_point wait_deadline(const httplib::Request& req) {
    auto wait = number(req.get_param_value("wait_ms"), "wait_ms").value_or(30000);
    auto capped = std::min(std::chrono::milliseconds(wait), options_.max_wait);
    return Clock::now() + capped;
  }

  void configure() {
    auto& s = *server_;
    // The pool is made in start(), on the caller's thread: httplib would make it on the
    // listener's, after start() returned, and until its first threads exist nothing is served.
    s.new_task_queue = [this] { return new BorrowedPool(*pool_); };
    s.set_tcp_nodelay(true);
    // httplib's default also sets SO_REUSEPORT, which lets a second endpoint share the port
    // silently; SO_REUSEADDR alone allows a quick restart and refuses a port in use.
    s.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    s.set_payload_max_length(options_.max_body_size);  // a declared length over it: 413

    // Runs once the headers are in and before any body is read.
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      request_parsed = true;
      auto refuse = [&](int status, const std::string& message) {
        reply_error(res, status, message);
        // The body was not read: the connection cannot carry another request.
        if (has_body_framing(req)) close_after_response = true;
        return httplib::Server::HandlerResponse::Handled;
      };
      request_grant = nullptr;
      if (!authorizations_.empty() && req.path != "/healthz" && req.path != "/readyz") {
        request_grant = grant_of(req.get_header_value("Authorization"));
        if (request_grant == nullptr) {
          res.set_header("WWW-Authenticate", "Bearer");
          return refuse(401, "missing or wrong bearer token");
        }
        if (request_grant->role == HttpGrant::Role::Read && !readers_may(req) &&
            !allowed_methods(req.path, options_.metrics_only).empty()) {
          return refuse(403, "this token may only read: " + req.method + " " +
                                 (req.path.starts_with("/v1/servers") ? "serving" : "this") +
                                 " needs a publish token");
        }
      }
      auto allowed = allowed_methods(req.path, options_.metrics_only);
      if (allowed.empty()) return refuse(404, "no such route");
      if (!method_allowed(req.method, allowed)) {
        res.set_header("Allow", allowed);
        return refuse(405, req.method + " is not allowed here; use " + allowed);
      }
      // No length and no chunks: the request has no body (RFC 9112 6.3); httplib would read
      // until the client closes.
      if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
        const_cast<httplib::Request&>(req).set_header("Content-Length", "0");
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    s.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          reply_error(res, res.status, res.status == 404 ? "no such route" : "request failed");
          return httplib::Server::HandlerResponse::Handled;
        }));
    // Counted before the response goes out, so that a client's next request already sees it.
    s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      metrics_.record(req.method, req.path, res.status, since_request_started());
    });
    if (options_.access_log) {
      s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        options_.access_log(HttpAccessRecord{
            req.method, req.path, res.status, since_request_started(),
            req.remote_addr.empty() ? connection_remote
                                    : req.remote_addr + ":" + std::to_string(req.remote_port)});
      });
    }
    // Bad input becomes a 4xx with a reason; anything else a 500. Never a crash.
    s.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          try {
            std::rethrow_exception(ep);
          } catch (const HttpStatusError& e) {
            reply_error(res, e.status, e.what());
          } catch (const Error& e) {
            bool client_fault =
                e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::InvalidMetadata;
            reply_error(res, client_fault ? 400 : 500, e.what());
          } catch (const std::exception& e) {
            reply_error(res, 500, e.what());
          } catch (...) {
            reply_error(res, 500, "unknown error");
          }
        });

    // httplib tries a method's routes in order, each a std::regex match: the hot fetch first.
    s.Get(R"(/v1/metadata/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      get_document(kOperations, req, res);
    });
    s.Get(R"(/v1/pools/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      get_document(kPools, req, res);
    });
    // Liveness: the process serves requests. It answers at once, also while the state file
    // still loads; /readyz says whether names are served yet.
    s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      if (store_.loaded()) return res.set_content("ready\n", "text/plain");
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content("loading\n", "text/plain");
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::map<std::string, double> gauges;
      if (!options_.metrics_only) {
        gauges = {{"memwire_state_loading", store_.loaded() ? 0.0 : 1.0},
                  {"memwire_request_servers", double(broker_.servers())},
                  {"memwire_requests_pending", double(broker_.pending())},
                  {"memwire_http_waiting_requests", double(waiting_.requests())},
                  {"memwire_http_waiting_bytes", double(waiting_.bytes())},
                  {"memwire_http_sending_bytes", double(sending_.bytes())}};
        // Not while loading: counting names would wait for the load.
        if (store_.loaded()) gauges["memwire_names"] = static_cast<double>(store_.size());
      }
      auto text = metrics_.render(gauges);
      if (options_.metrics) text += options_.metrics();
      res.set_content(text, "text/plain; version=0.0.4");
    });

    s.Get("/v1/metadata", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(safe_dump(json{{"names", store_.names()}}), "application/json");
    });
    // Every route that takes a body reads it through read_body(): bounded however it is framed.
    for (const DocumentKind* kind : {&kOperations, &kPools}) {
      s.Put(kind->route, [this, kind](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) {
        put_document(*kind, req, res, reader);
      });
      s.Delete(kind->route, [this, kind](const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& reader) {
        auto name = req.matches[1].str();
        validate_name(name);
        require_owner(name, "withdraw");
        read_body(res, reader);
        if (!store_.erase(kind->key(name)))
          return reply_error(res, 404, std::string("no such ") + kind->noun + " '" + name + "'");
        res.status = 204;
      });
    }

    s.Post("/v1/servers", [this](const httplib::Request&, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
      auto body = json::parse(read_body(res, reader), nullptr, false);
      if (!body.is_object() || !body.contains("prefix") || !body["prefix"].is_string()) {
        return reply_error(res, 400, "body must be {\"prefix\": \"...\"}");
      }
      auto prefix = body["prefix"].get<std::string>();
      channel_rules::check_prefix(prefix);
      require_owner(prefix, "serve");
      res.set_content(safe_dump(json{{"id", broker_.add_server(prefix, caller())}}),
                      "application/json");
    });
    s.Delete(R"(/v1/servers/([0-9a-f]+))",
             [this](const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader& reader) {
               require_caller_owns(broker_.server_owner(req.matches[1].str()), "remove");
               read_body(res, reader);
               if (!broker_.remove_server(req.matches[1].str())) {
                 return reply_error(res, 404, "no such server");
               }
               res.status = 204;
             });
    s.Get(R"(/v1/servers/([0-9a-f]+)/requests)", [this](const httplib::Request& req,
                                                        httplib::Response& res) {
      require_caller_owns(broker_.server_owner(req.matches[1].str()), "poll");
      LongPollSlot slot(waiting_, 0);
      auto requests = broker_.poll(req.matches[1].str(), wait_deadline(req));
      if (!requests) return reply_error(res, 404, "no such server");
      json out = json::array();
      for (auto& r : *requests) {
        out.push_back({{"id", r.id}, {"name", r.name}, {"metadata", r.document}});
      }
      sending_.send(res, std::make_shared<const std::string>(safe_dump(json{{"requests", out}})),
                    "application/json");
    });
    s.Post(R"(/v1/requests/([0-9a-f]+)/reply)",
           [this](const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader) {
             require_caller_owns(broker_.request_owner(req.matches[1].str()), "answer");
             auto body = json::parse(read_body(res, reader), nullptr, false);
             if (!body.is_object() || !body.contains("status") || !body["status"].is_string()) {
               return reply_error(res, 400, "body must be {\"status\": \"done\"|\"error\", ...}");
             }
             http::RequestBroker::Result result;
             result.done = body["status"] == "done";
             if (!result.done) {
               result.code = body.value("code", "transport");
               result.message = body.value("message", "the owner failed");
             }
             if (!broker_.reply(req.matches[1].str(), std::move(result))) {
               return reply_error(res, 404, "no such request (it may have timed out)");
             }
             res.status = 204;
           });
    s.Post(R"(/v1/requests/([^/]+))", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
      auto name = req.matches[1].str();
      validate_name(name);
      // Counted from before its body is read (upload and check included); a call over the
      // budget has its body read and dropped, so that its client hears the 503.
      std::optional<LongPollSlot> slot;
      try {
        slot.emplace(waiting_, expected_body_bytes(req, options_.max_body_size));
      } catch (const HttpStatusError&) {
        discard_body(reader, options_.max_body_size);
        throw;
      }
      auto body = read_body(res, reader);
      // Checked, then let go: only the body waits.
      if (RdmaMetadata::from_json(body).operation_kind() != OperationKind::Write) {
        throw Error(ErrorCode::InvalidMetadata, "a request carries writable metadata");
      }
      body.shrink_to_fit();
      slot->shrink_to(body.capacity());
      auto result = broker_.submit(name, std::move(body), wait_deadline(req));
      if (!result.done && result.code == "not found") return reply_error(res, 404, result.message);
      if (!result.done && result.code == "timeout") return reply_error(res, 504, result.message);
      res.set_content(safe_dump(result_json(result)), "application/json");
    });
  }

  void get_document(const DocumentKind& kind, const httplib::Request& req, httplib::Response& res) {
    auto name = req.matches[1].str();
    validate_name(name);
    std::shared_ptr<const std::string> document;
    if (req.has_param("wait_ms")) {
      // Waiting holds no body; the answer's counts once it is found.
      LongPollSlot slot(waiting_, 0);
      document = store_.wait_to_share(kind.key(name), wait_deadline(req));
      if (!document) return reply_error(res, 504, "'" + name + "' was not published in time");
    } else {
      document = store_.share(kind.key(name));
      if (!document)
        return reply_error(res, 404, std::string("no such ") + kind.noun + " '" + name + "'");
    }
    // The store's own document, not a copy: every reader shares it (sending_bodies.hpp).
    sending_.send(res, std::move(document), "application/json");
  }

  void put_document(const DocumentKind& kind, const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader& reader) {
    auto name = req.matches[1].str();
    validate_name(name);
    require_owner(name, "publish");
    auto body = read_body(res, reader, kind.max_body);
    kind.check(body);  // throws InvalidMetadata -> 400
    auto ttl = number(req.get_param_value("ttl_ms"), "ttl_ms");
    const char* ttl_from = "ttl_ms";
    if (!ttl) {
      ttl = number(req.get_header_value("X-Memwire-TTL-Ms"), "X-Memwire-TTL-Ms");
      ttl_from = "X-Memwire-TTL-Ms";
    }
    // Past max_ttl, now + ttl could overflow the clock (9.2e12 ms did: 204, then 404).
    if (ttl && *ttl > options_.max_ttl.count()) {
      throw Error(ErrorCode::InvalidArgument, std::string(ttl_from) + " must be at most " +
                                                  std::to_string(options_.max_ttl.count()) +
                                                  " (max_ttl)");
    }
    const http::Quota quota{options_.max_names_per_grant, options_.max_bytes_per_grant};
    try {
      store_.put(kind.key(name), std::move(body), std::chrono::milliseconds(ttl.value_or(0)),
                 owner(), quota);
    } catch (const http::QuotaExceeded& e) {
      const bool names = e.limit == http::QuotaExceeded::Limit::Names;
      const char* limit = names ? "max_names_per_grant" : "max_bytes_per_grant";
      const char* flag = names ? "--max-names-per-grant" : "--max-bytes-per-grant";
      res.status = 403;
      res.set_content(
          safe_dump(json{
              {"error", std::string("over quota: this token may not store ") + kind.noun + " '" +
                            name + "': " + e.what() + " (" + limit + " " + std::to_string(e.max) +
                            ", memwire-registry " + flag + "); withdraw names or raise the limit"},
              {"limit", limit},
              {"flag", flag},
              {"used", e.used},
              {"max", e.max}}),
          "application/json");
      return;
    }
    res.status = 204;
  }

  void sweep_loop() {
    std::unique_lock lock(sweep_mutex_);
    while (!stopped_) {
      sweep_wake_.wait_for(lock, options_.ttl_sweep_interval, [this] { return stopped_; });
      if (stopped_) break;
      lock.unlock();
      store_.sweep();
      broker_.sweep();
      lock.lock();
    }
  }

  HttpEndpointOptions options_;
  // Every accepted token as "Bearer <token>" with its grant (the plain `token` is one for
  // Publish on every name); empty = no authentication.
  std::vector<std::pair<std::string, HttpGrant>> authorizations_;
  std::vector<std::string> owners_;  // owner_of_token() of each, in the same order

  // The broker's name for the grant the request presents: its place among the tokens (so the
  // broker keeps no secret); empty without authentication.
  std::string caller() const {
    if (request_grant == nullptr) return {};
    for (std::size_t i = 0; i < authorizations_.size(); ++i) {
      if (&authorizations_[i].second == request_grant) return "grant " + std::to_string(i);
    }
    return "unknown";
  }

  // Whose quota a stored name counts against: the request's token (see owner_of_token).
  std::string owner() const {
    if (request_grant == nullptr) return {};
    for (std::size_t i = 0; i < authorizations_.size(); ++i) {
      if (&authorizations_[i].second == request_grant) return owners_[i];
    }
    return {};
  }

  // A request server's id, and the id of a request it took, are no capability: only the grant
  // that registered the server (or the plain --token) may poll or remove it and answer those
  // requests. An unknown id falls through to the handler's 404.
  void require_caller_owns(const std::optional<std::string>& owner, const char* what) const {
    if (!owner || request_grant == nullptr) return;
    const bool plain_token = !options_.token.empty() && request_grant == &authorizations_[0].second;
    if (plain_token || *owner == caller()) return;
    // Refused before the body is read: the connection cannot carry another request.
    close_after_response = true;
    throw HttpStatusError(403, std::string("this token may not ") + what +
                                   " there: another token registered that request server");
  }

  // The grant whose token the request presents, or null. Compares with every token, each in
  // constant time, so the time taken tells nothing of which token nearly matched.
  const HttpGrant* grant_of(const std::string& authorization) const {
    const HttpGrant* found = nullptr;
    for (const auto& [expected, grant] : authorizations_) {
      if (same_secret(authorization, expected)) found = &grant;
    }
    return found;
  }
  http::MetadataStore store_;
  http::RequestBroker broker_;
  http::Metrics metrics_;
  // Lends the pool made in start() to the server, which deletes what new_task_queue gives it.
  // stop() shuts the pool down itself, once the listener is gone (also if it never ran).
  struct BorrowedPool final : httplib::TaskQueue {
    explicit BorrowedPool(http::ConnectionPool& pool) : pool(pool) {}
    void enqueue(std::function<void()> fn) override { pool.enqueue(std::move(fn)); }
    void shutdown() override {}
    http::ConnectionPool& pool;
  };
  http::ConnectionLimits limits_;
  http::StopSignal stop_signal_;
  http::WaitingRequests waiting_{options_.max_long_polls, options_.max_waiting_bytes};
  http::SendingBodies sending_{options_.max_sending_bytes};
  SSL_CTX* ssl_context_ = nullptr;  // set when serving HTTPS; owned by the server
  std::unique_ptr<http::ConnectionPool> pool_;
  std::unique_ptr<httplib::Server> server_;
  std::function<void()> widen_backlog_;
  std::function<void()> close_listener_;
  std::string scheme_;
  int port_ = -1;

  std::mutex lifecycle_;
  bool started_ = false;
  std::thread listener_;
  std::thread sweeper_;
  std::thread loader_;
  std::mutex sweep_mutex_;
  std::condition_variable sweep_wake_;
  bool stopped_ = false;
};

HttpEndpoint::HttpEndpoint(HttpEndpointOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpEndpoint::~HttpEndpoint() = default;
void HttpEndpoint::start() { impl_->start(); }
void HttpEndpoint::stop() { impl_->stop(); }
std::uint16_t HttpEndpoint::port() const noexcept { return impl_->port(); }
std::string HttpEndpoint::url() const { return impl_->url(); }
std::size_t HttpEndpoint::size() const { return impl_->size(); }
bool HttpEndpoint::ready() const noexcept { return impl_->ready(); }

}  // namespace memwire::sideband
