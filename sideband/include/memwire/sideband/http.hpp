#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/export.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::sideband {

// One served HTTP request, for access logs.
struct MEMWIRE_API HttpAccessRecord {
  std::string method;
  std::string path;
  int status = 0;
  std::chrono::microseconds duration{0};
  std::string remote;
};

// What one bearer token may do at an HttpEndpoint (see HttpEndpointOptions::grants).
//   Read:    GET names, list, long-poll, send requests (POST /v1/requests/{name}), /metrics.
//   Publish: all of Read, and PUT/DELETE names under `prefix`, register servers
//            (POST /v1/servers) for prefixes under it, poll, remove and reply as a server it
//            registered (another token that knows the server's or a request's id gets 403;
//            the plain `token` may act for every server).
// `prefix` covers itself and every name below it ("a" covers "a" and "a.x", not "ab");
// empty covers every name (and only then may a server register the empty prefix).
struct MEMWIRE_API HttpGrant {
  enum class Role { Read, Publish };
  std::string token;
  Role role = Role::Read;
  std::string prefix;
};

// The grants in a text of lines "TOKEN ROLE PREFIX" (ROLE `read` or `publish`, PREFIX a name
// or `*` for every name); blank lines and lines starting with '#' are skipped. Hostile input
// is refused with Error{InvalidArgument} naming the line: more than kMaxGrants lines, a token
// shorter than 16 or longer than 4096 characters or holding anything but printable ASCII other
// than space, a repeated token, an unknown role, an invalid prefix, extra fields.
MEMWIRE_API std::vector<HttpGrant> parse_http_grants(std::string_view text);
// parse_http_grants() of a file of at most kMaxGrantFileBytes; Error{InvalidArgument} when it
// cannot be read or is larger.
MEMWIRE_API std::vector<HttpGrant> load_http_grants(const std::string& path);
inline constexpr std::size_t kMaxGrants = 4096;
inline constexpr std::size_t kMaxGrantFileBytes = 1u << 20;

struct MEMWIRE_API HttpEndpointOptions {
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;  // 0 = any free port; see HttpEndpoint::port()
  // Bearer token every request but GET /healthz must present; empty = no authentication
  // (unless `grants` are set). It may do everything: Publish for every name.
  std::string token;
  // Tokens scoped to a role and a name prefix (see HttpGrant); with `token`, either is
  // accepted. A request with a valid token that its grant does not allow is answered 403.
  std::vector<HttpGrant> grants;
  // Both set = HTTPS with this PEM certificate chain and private key.
  std::string cert_file;
  std::string key_file;
  // How often expired names and dead request servers are swept away.
  std::chrono::milliseconds ttl_sweep_interval = std::chrono::seconds(1);
  // Upper bound of one long poll; clients that want longer poll again.
  std::chrono::milliseconds max_wait = std::chrono::minutes(5);
  // Non-empty: every change is appended to this file (a log, compacted as it grows) and it is
  // reloaded at start, so a restarted endpoint still knows its names.
  std::string state_file;
  // Limits. Each has a default that survives floods (see sideband/README.md, "Limits").
  // Server threads started up front; more start on demand, one per open connection, up to
  // max_connections.
  std::size_t threads = 8;
  // Connections served at once (each holds a thread while open); one more is answered 503
  // and closed.
  std::size_t max_connections = 1024;
  // Requests that wait (long polls, request/reply calls) at once; one more is answered 503.
  // Kept below max_connections so that short requests always find room.
  std::size_t max_long_polls = 512;
  // Bytes of bodies that waiting requests hold at once, counted from before a body is read (its
  // Content-Length; chunked: max_body_size) until the call ends (a request/reply call keeps its
  // body until it is answered); one more that does not fit is answered 503.
  std::size_t max_waiting_bytes = 64u << 20;
  // Request body size; a larger body (however framed: length or chunks) is answered 413.
  std::size_t max_body_size = 16u << 20;
  // Bytes of bodies that answers being sent hold at once. A stored document is shared by all
  // its readers and counts once (one replaced while readers still take it counts apart); an
  // answer that would pass it is 503 before a byte goes. At least max_body_size.
  std::size_t max_sending_bytes = 64u << 20;
  // An answer must be sent whole within this time of its first byte; a reader slower than
  // that is cut off (its connection closed). Each write must also progress within 5 s.
  std::chrono::milliseconds send_timeout = std::chrono::seconds(30);
  // A request's headers and body must arrive within this time after its first byte (against
  // slowloris: a byte now and then never times out a single read).
  std::chrono::milliseconds request_read_timeout = std::chrono::seconds(10);
  // An idle keep-alive connection is closed after this time.
  std::chrono::milliseconds keep_alive_timeout = std::chrono::seconds(5);
  // Longest ttl_ms a PUT may ask for; more is answered 400.
  std::chrono::milliseconds max_ttl = std::chrono::days(365);
  // What one token (each grant's, the plain `token`; without authentication, all callers
  // together) may hold: names (operations and pools) and bytes (each name's length plus its
  // document's). A PUT past either is answered 403 {"error", "limit", "flag", "used", "max"};
  // replacing a name of its own counts the new document only. 0 = no limit.
  std::size_t max_names_per_grant = 1024;
  std::size_t max_bytes_per_grant = 64u << 20;
  // Called after each request (on a server thread): keep it short.
  std::function<void(const HttpAccessRecord&)> access_log;
  // More Prometheus text for GET /metrics, e.g. a worker's data-plane telemetry:
  // [&connector] { return memwire::to_prometheus(connector.telemetry()); }
  std::function<std::string()> metrics;
  // Serve GET /healthz and /metrics only (see MetricsListener); every other path is 404.
  bool metrics_only = false;
};

// The HTTP metadata endpoint, embeddable in any process and run standalone by memwire-registry.
//   PUT    /v1/metadata/{name}[?ttl_ms=N]   body: metadata JSON (checked); or X-Memwire-TTL-Ms
//   GET    /v1/metadata/{name}[?wait_ms=N]  404 when unknown; with wait_ms, a long poll (504 when
//                                           the wait ends first)
//   DELETE /v1/metadata/{name}
//   GET    /v1/metadata                     {"names": [...]} (operations only)
//   PUT, GET, DELETE /v1/pools/{name}       the same for pools' metadata (PoolMetadata),
//                                           a namespace of their own; body <= kMaxJsonBytes
//   GET    /healthz (alive: at once), /readyz (503 while the state file loads), /metrics
//   Request/reply, see docs in src/http/server/request_broker.hpp:
//   POST   /v1/servers {"prefix": P} -> {"id": S};  DELETE /v1/servers/{S}
//   GET    /v1/servers/{S}/requests?wait_ms=N -> {"requests":[{"id","name","metadata"}]}
//   POST   /v1/requests/{name}?wait_ms=N  body: writable metadata -> {"status":"done"} or
//                                         {"status":"error","code":...,"message":...}
//   POST   /v1/requests/{id}/reply          body: {"status":"done"} or the error form
class MEMWIRE_API HttpEndpoint {
 public:
  // Binds at once (so port() is known); throws Error{Transport} when it cannot.
  [[nodiscard("dropping it stops the endpoint at once")]] explicit HttpEndpoint(
      HttpEndpointOptions options = {});
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Serves on a background thread until stop(). Idempotent.
  void start();
  // Ends long polls, stops accepting, joins. Idempotent; the destructor calls it.
  void stop();

  std::uint16_t port() const noexcept;
  // "http://127.0.0.1:PORT" (https when TLS is on).
  std::string url() const;
  // Names currently published; while the state file still loads, waits for it.
  std::size_t size() const;
  // False while the state file still loads (in the background, from construction on): requests
  // that touch names wait for it, GET /readyz answers 503 "loading"; GET /healthz answers
  // at once either way.
  bool ready() const noexcept;

 private:
  class MEMWIRE_HIDDEN Impl;
  std::unique_ptr<Impl> impl_;
};

struct MEMWIRE_API HttpChannelOptions {
  std::string url;    // the endpoint: "http://host:port" or "https://host:port"
  std::string token;  // sent as "Authorization: Bearer ..."
  std::string user;   // HTTP basic auth (for endpoints behind a proxy); empty = none
  std::string password;
  std::string ca_file;      // HTTPS: trust this CA bundle in addition to the system's
  bool verify_peer = true;  // HTTPS: check the server's certificate and host name
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
  // Total time for calls that take no timeout of their own (publish, withdraw, list).
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
  // Retries on connection failures and 500/502/503, doubling the backoff each time.
  int max_retries = 3;
  std::chrono::milliseconds retry_backoff = std::chrono::milliseconds(20);
  // Requests one serve() answers at once (one poller each).
  unsigned serve_concurrency = 4;
  // A reply body larger than this fails the call (Protocol) as soon as it says so or grows past
  // it: a wrong URL or a hostile server must not fill this process's memory.
  std::size_t max_reply_size = 64u << 20;
};

// Channel over an HttpEndpoint, on libcurl. Keeps its connections open between calls; safe to
// use from several threads (each call takes an idle connection or opens one).
class MEMWIRE_API HttpChannel final : public Channel {
 public:
  explicit HttpChannel(HttpChannelOptions options);
  ~HttpChannel() override;
  HttpChannel(const HttpChannel&) = delete;
  HttpChannel& operator=(const HttpChannel&) = delete;

  MEMWIRE_SIDEBAND_REGISTRY_OVERRIDES;  // channel.hpp
  MEMWIRE_SIDEBAND_REQUEST_SERVICE_OVERRIDES;

 private:
  class MEMWIRE_HIDDEN Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace memwire::sideband
