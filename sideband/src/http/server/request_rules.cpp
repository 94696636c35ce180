#include "http/server/request_rules.hpp"

#include <openssl/crypto.h>

#include <charconv>

#include "memwire/error.hpp"

namespace memwire::sideband::http {

using json = nlohmann::json;

// Set by a handler that leaves part of a request unread: the connection closes after the answer.
thread_local bool close_after_response = false;

// Set when a request's first byte is in, on the connection's thread; the same thread then
// parses it and runs the handler and the hooks.
thread_local Clock::time_point request_started;
// Set by the pre-routing handler: the request parsed whole. A request httplib could not parse
// (malformed, or cut at the request-read deadline) never reaches it.
thread_local bool request_parsed = false;
// The connection's "address:port", for a log line whose request never got that far.
thread_local std::string connection_remote;
// What the request's token may do, set by the pre-routing handler; null = no authentication
// configured (everything is allowed).
thread_local const HttpGrant* request_grant = nullptr;

namespace {

// Whether `prefix` covers `name`: itself and every name below it; the empty prefix all.
bool covers(const std::string& prefix, std::string_view name) {
  if (prefix.empty()) return true;
  if (!name.starts_with(prefix)) return false;
  return name.size() == prefix.size() || name[prefix.size()] == '.';
}

}  // namespace

// Throws 403 unless the request's token may publish, withdraw or serve `name` (a prefix
// when serving: "" needs a grant for every name).
void require_owner(std::string_view name, const char* what) {
  const HttpGrant* grant = request_grant;
  if (grant == nullptr) return;
  // Refused before the body is read: the connection cannot carry another request.
  auto refuse = [](const std::string& message) {
    close_after_response = true;
    throw HttpStatusError(403, message);
  };
  std::string shown =
      name.empty() ? std::string("every name (the empty prefix)") : "'" + std::string(name) + "'";
  if (grant->role != HttpGrant::Role::Publish) {
    refuse(std::string("this token may only read; it may not ") + what + " " + shown);
  }
  if (!covers(grant->prefix, name) || (name.empty() && !grant->prefix.empty())) {
    refuse(std::string("this token may not ") + what + " " + shown +
           ": it is limited to the prefix '" + grant->prefix + "'");
  }
}

// Whether a read token may make this request: reading names, lists and metrics, and sending
// requests (POST /v1/requests/{name}); not serving, publishing or withdrawing.
bool readers_may(const httplib::Request& req) {
  if (req.method == "GET" || req.method == "HEAD") return !req.path.starts_with("/v1/servers");
  if (req.method != "POST") return false;
  constexpr std::string_view kRequests = "/v1/requests/";
  return req.path.starts_with(kRequests) &&
         req.path.find('/', kRequests.size()) == std::string::npos;
}

std::chrono::microseconds since_request_started() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - request_started);
}

// Never throws on bytes that are not UTF-8 (they become U+FFFD): a dump that threw inside the
// error path took the process down.
std::string safe_dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(safe_dump(json{{"error", message}}), "application/json");
}

// The methods a path takes ("GET, HEAD, PUT"), empty when no route has the path. Checked before
// routing, so that a wrong method is 405 with Allow and its body is never read.
std::string allowed_methods(const std::string& path, bool metrics_only) {
  auto segment_ok = [](std::string_view s) {
    return !s.empty() && s.find('/') == std::string_view::npos;
  };
  std::string_view p = path;
  if (p == "/healthz" || p == "/readyz" || p == "/metrics") return "GET, HEAD";
  if (metrics_only) return "";
  if (p == "/v1/metadata") return "GET, HEAD";
  if (p == "/v1/servers") return "POST";
  if (p.starts_with("/v1/metadata/") && segment_ok(p.substr(13))) return "GET, HEAD, PUT, DELETE";
  if (p.starts_with("/v1/pools/") && segment_ok(p.substr(10))) return "GET, HEAD, PUT, DELETE";
  if (p.starts_with("/v1/servers/")) {
    auto rest = p.substr(12);
    if (segment_ok(rest)) return "DELETE";
    if (rest.ends_with("/requests") && segment_ok(rest.substr(0, rest.size() - 9))) {
      return "GET, HEAD";
    }
    return {};
  }
  if (p.starts_with("/v1/requests/")) {
    auto rest = p.substr(13);
    if (segment_ok(rest)) return "POST";
    if (rest.ends_with("/reply") && segment_ok(rest.substr(0, rest.size() - 6))) return "POST";
  }
  return {};
}

bool method_allowed(const std::string& method, const std::string& allowed) {
  std::string_view list = allowed;
  while (!list.empty()) {
    auto comma = list.find(", ");
    if (list.substr(0, comma) == method) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 2);
  }
  return false;
}

bool has_body_framing(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
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

}  // namespace memwire::sideband::http
