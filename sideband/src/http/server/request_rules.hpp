#pragma once

// The rules the HTTP endpoint checks a request by, before and while it is routed (methods per
// path, tokens' grants, numbers in the query), its error answers, and what it knows of the
// request that a connection's thread is serving: one at a time, so in thread-local variables.

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "http/server/connection.hpp"
#include "http/server/request_broker.hpp"
#include "memwire/sideband/http.hpp"

namespace memwire::sideband::http {

// An answer other than 400/500, thrown by a handler.
struct HttpStatusError : std::runtime_error {
  HttpStatusError(int status, const std::string& message)
      : std::runtime_error(message), status(status) {}
  int status;
};

// Set by a handler that leaves part of a request unread: the connection closes after the answer.
extern thread_local bool close_after_response;
// Set when a request's first byte is in, on the connection's thread.
extern thread_local Clock::time_point request_started;
// Set by the pre-routing handler: the request parsed whole.
extern thread_local bool request_parsed;
// The connection's "address:port", for a log line whose request never got that far.
extern thread_local std::string connection_remote;
// What the request's token may do; null = no authentication configured.
extern thread_local const HttpGrant* request_grant;

// Throws 403 unless the request's token may publish, withdraw or serve `name`.
void require_owner(std::string_view name, const char* what);
// Whether a read token may make this request.
bool readers_may(const httplib::Request& req);
std::chrono::microseconds since_request_started();
// JSON text that never throws on bytes that are not UTF-8.
std::string safe_dump(const nlohmann::json& value);
void reply_error(httplib::Response& res, int status, const std::string& message);
// The methods a path takes ("GET, HEAD, PUT"), empty when no route has the path.
std::string allowed_methods(const std::string& path, bool metrics_only);
bool method_allowed(const std::string& method, const std::string& allowed);
bool has_body_framing(const httplib::Request& req);
// A non-negative integer query parameter or header; nullopt when absent; throws when malformed.
std::optional<std::int64_t> number(const std::string& text, const char* what);
// Compares in constant time.
bool same_secret(const std::string& a, const std::string& b);
// A request/reply call's answer as the requester reads it.
nlohmann::json result_json(const RequestBroker::Result& result);

}  // namespace memwire::sideband::http
