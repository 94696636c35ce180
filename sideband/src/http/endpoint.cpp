#include <httplib.h>
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "http/metadata_store.hpp"
#include "http/metrics.hpp"
#include "http/request_broker.hpp"
#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "memwire/sideband/http.hpp"

namespace memwire::sideband {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr int kListenBacklog = 1024;  // httplib's compiled-in 5 drops bursts of connects
constexpr std::size_t kMaxBody = 16u << 20;

// httplib keeps the listening socket to itself; this reaches it to widen the backlog and to
// close it whether or not listen() has started yet (Server::stop() only acts once running).
template <class Base>
class OwnedServer : public Base {
 public:
  using Base::Base;
  void widen_backlog() { ::listen(this->svr_sock_, kListenBacklog); }
  void close_listener() {
    auto sock = this->svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) {
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
    }
  }
};

// Set by the pre-routing handler; the same server thread then runs the handler and the hooks.
thread_local Clock::time_point request_started;

std::chrono::microseconds since_request_started() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - request_started);
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json{{"error", message}}.dump(), "application/json");
}

// A non-negative integer query parameter or header; nullopt when absent; throws when malformed.
std::optional<std::int64_t> number(const std::string& text, const char* what) {
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 0) {
    throw Error(ErrorCode::InvalidArgument, std::string(what) + " must be a non-negative integer");
  }
  return value;
}

bool same_secret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

json result_json(const http::RequestBroker::Result& result) {
  if (result.done) return json{{"status", "done"}};
  return json{{"status", "error"}, {"code", result.code}, {"message", result.message}};
}

}  // namespace

class HttpEndpoint::Impl {
 public:
  explicit Impl(HttpEndpointOptions options)
      : options_(std::move(options)),
        expected_authorization_("Bearer " + options_.token),
        store_(options_.state_file) {
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
  }

  ~Impl() { stop(); }

  void start() {
    std::lock_guard lock(lifecycle_);
    if (started_ || stopped_) return;
    started_ = true;
    pool_ = std::make_unique<httplib::ThreadPool>(pool_threads_);
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
    if (pool_) pool_->shutdown();  // waits for the requests still being served
    if (sweeper_.joinable()) sweeper_.join();
  }

  std::uint16_t port() const noexcept { return static_cast<std::uint16_t>(port_); }
  std::string url() const {
    auto host = options_.bind_address == "0.0.0.0" ? "127.0.0.1" : options_.bind_address;
    return scheme_ + "://" + host + ":" + std::to_string(port_);
  }
  std::size_t size() { return store_.size(); }

 private:
  template <class S>
  void hooks(S& server) {
    widen_backlog_ = [&server] { server.widen_backlog(); };
    close_listener_ = [&server] { server.close_listener(); };
  }

  // Long polls without ?wait_ms= wait 30 s (or max_wait when that is shorter).
  Clock::time_point wait_deadline(const httplib::Request& req) {
    auto wait = number(req.get_param_value("wait_ms"), "wait_ms").value_or(30000);
    auto capped = std::min(std::chrono::milliseconds(wait), options_.max_wait);
    return Clock::now() + capped;
  }

  void configure() {
    auto& s = *server_;
    auto threads = std::max<std::size_t>(options_.threads, 4);
    // The pool is made in start(), on the caller's thread: httplib would make it on the
    // listener's, after start() returned, and until its last thread exists nothing is served
    // (256 threads under TSan on a loaded machine took 2.5 s).
    pool_threads_ = threads;
    s.new_task_queue = [this] { return new BorrowedPool(*pool_); };
    s.set_tcp_nodelay(true);
    // httplib's default also sets SO_REUSEPORT, which lets a second endpoint share the port
    // silently; SO_REUSEADDR alone allows a quick restart and refuses a port in use.
    s.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    s.set_keep_alive_max_count(100000);
    s.set_keep_alive_timeout(5);
    s.set_payload_max_length(kMaxBody);

    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      request_started = Clock::now();
      if (options_.token.empty() || req.path == "/healthz") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      if (same_secret(req.get_header_value("Authorization"), expected_authorization_)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.set_header("WWW-Authenticate", "Bearer");
      reply_error(res, 401, "missing or wrong bearer token");
      return httplib::Server::HandlerResponse::Handled;
    });
    // Counted before the response goes out, so that a client's next request already sees it.
    s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      metrics_.record(req.method, req.path, res.status, since_request_started());
    });
    if (options_.access_log) {
      s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        options_.access_log(
            HttpAccessRecord{req.method, req.path, res.status, since_request_started(),
                             req.remote_addr + ":" + std::to_string(req.remote_port)});
      });
    }
    // Bad input becomes a 4xx with a reason; anything else a 500. Never a crash.
    s.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          try {
            std::rethrow_exception(ep);
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
      auto name = req.matches[1].str();
      validate_name(name);
      std::optional<std::string> document;
      if (req.has_param("wait_ms")) {
        document = store_.wait_for(name, wait_deadline(req));
        if (!document) return reply_error(res, 504, "'" + name + "' was not published in time");
      } else {
        document = store_.get(name);
        if (!document) return reply_error(res, 404, "no such name '" + name + "'");
      }
      // Moved, not copied: set_content() would copy the document once more.
      res.body = std::move(*document);
      res.set_header("Content-Type", "application/json");
    });
    s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      auto text = metrics_.render({{"memwire_names", static_cast<double>(store_.size())},
                                   {"memwire_request_servers", double(broker_.servers())},
                                   {"memwire_requests_pending", double(broker_.pending())}});
      res.set_content(text, "text/plain; version=0.0.4");
    });

    s.Get("/v1/metadata", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"names", store_.names()}}.dump(), "application/json");
    });
    s.Put(R"(/v1/metadata/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      auto name = req.matches[1].str();
      validate_name(name);
      RdmaMetadata::from_json(req.body);  // throws InvalidMetadata -> 400
      auto ttl = number(req.get_param_value("ttl_ms"), "ttl_ms");
      if (!ttl) ttl = number(req.get_header_value("X-Memwire-TTL-Ms"), "X-Memwire-TTL-Ms");
      store_.put(name, req.body, std::chrono::milliseconds(ttl.value_or(0)));
      res.status = 204;
    });
    s.Delete(R"(/v1/metadata/([^/]+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               auto name = req.matches[1].str();
               validate_name(name);
               if (!store_.erase(name)) return reply_error(res, 404, "no such name '" + name + "'");
               res.status = 204;
             });

    s.Post("/v1/servers", [this](const httplib::Request& req, httplib::Response& res) {
      auto body = json::parse(req.body, nullptr, false);
      if (!body.is_object() || !body.contains("prefix") || !body["prefix"].is_string()) {
        return reply_error(res, 400, "body must be {\"prefix\": \"...\"}");
      }
      auto prefix = body["prefix"].get<std::string>();
      if (!prefix.empty()) validate_name(prefix);
      res.set_content(json{{"id", broker_.add_server(prefix)}}.dump(), "application/json");
    });
    s.Delete(R"(/v1/servers/([0-9a-f]+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               if (!broker_.remove_server(req.matches[1].str())) {
                 return reply_error(res, 404, "no such server");
               }
               res.status = 204;
             });
    s.Get(R"(/v1/servers/([0-9a-f]+)/requests)",
          [this](const httplib::Request& req, httplib::Response& res) {
            auto requests = broker_.poll(req.matches[1].str(), wait_deadline(req));
            if (!requests) return reply_error(res, 404, "no such server");
            json out = json::array();
            for (auto& r : *requests) {
              out.push_back({{"id", r.id}, {"name", r.name}, {"metadata", r.document}});
            }
            res.set_content(json{{"requests", out}}.dump(), "application/json");
          });
    s.Post(R"(/v1/requests/([0-9a-f]+)/reply)",
           [this](const httplib::Request& req, httplib::Response& res) {
             auto body = json::parse(req.body, nullptr, false);
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
    s.Post(R"(/v1/requests/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      auto name = req.matches[1].str();
      validate_name(name);
      auto writable = RdmaMetadata::from_json(req.body);
      if (writable.operation_kind() != OperationKind::Write) {
        throw Error(ErrorCode::InvalidMetadata, "a request carries writable metadata");
      }
      auto result = broker_.submit(name, req.body, wait_deadline(req));
      if (!result.done && result.code == "not found") return reply_error(res, 404, result.message);
      if (!result.done && result.code == "timeout") return reply_error(res, 504, result.message);
      res.set_content(result_json(result).dump(), "application/json");
    });
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
  std::string expected_authorization_;  // "Bearer <token>", built once
  http::MetadataStore store_;
  http::RequestBroker broker_;
  http::Metrics metrics_;
  // Lends the pool made in start() to the server, which deletes what new_task_queue gives it.
  // stop() shuts the pool down itself, once the listener is gone (also if it never ran).
  struct BorrowedPool final : httplib::TaskQueue {
    explicit BorrowedPool(httplib::ThreadPool& pool) : pool(pool) {}
    void enqueue(std::function<void()> fn) override { pool.enqueue(std::move(fn)); }
    void shutdown() override {}
    httplib::ThreadPool& pool;
  };
  std::size_t pool_threads_ = 4;
  std::unique_ptr<httplib::ThreadPool> pool_;
  std::unique_ptr<httplib::Server> server_;
  std::function<void()> widen_backlog_;
  std::function<void()> close_listener_;
  std::string scheme_;
  int port_ = -1;

  std::mutex lifecycle_;
  bool started_ = false;
  std::thread listener_;
  std::thread sweeper_;
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

}  // namespace memwire::sideband
