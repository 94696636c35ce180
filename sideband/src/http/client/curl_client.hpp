#pragma once

#include <curl/curl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "memwire/sideband/http.hpp"

namespace memwire::sideband::http {

struct CurlEasyDeleter {
  void operator()(CURL* handle) const noexcept { curl_easy_cleanup(handle); }
};
using CurlEasy = std::unique_ptr<CURL, CurlEasyDeleter>;

struct CurlSlistDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistDeleter>;

struct HttpCall {
  const char* method = "GET";
  std::string target;  // path and query, e.g. "/v1/metadata/x?wait_ms=10"
  std::string body;
  std::chrono::milliseconds timeout{0};
  // Safe to send twice: only these are retried after the request may have reached the server.
  bool idempotent = true;
};

struct HttpReply {
  long status = 0;
  std::string body;
};

// An easy handle with the options that never change set once; a call sets only its own.
struct CurlHandle {
  CurlEasy easy;
  char error[CURL_ERROR_SIZE] = {};
};

// libcurl easy handles kept open between calls (each holds its connection), lent one per call
// so that a long poll on one thread never holds up a fetch on another.
class CurlClient {
 public:
  explicit CurlClient(const HttpChannelOptions& options);
  // Any HTTP status comes back; wire failures throw Error{Timeout} or Error{Transport} once the
  // retries (connection failures, 500/502/503) are spent.
  // A stop requested on `abandon` aborts the call (Error{Cancelled}) instead of waiting on.
  HttpReply perform(const HttpCall& call, std::stop_token abandon = {});
  const std::string& url() const noexcept { return base_url_; }

 private:
  std::unique_ptr<CurlHandle> make_handle() const;
  std::unique_ptr<CurlHandle> acquire();
  void release(std::unique_ptr<CurlHandle> handle);
  CURLcode attempt(CurlHandle& handle, const HttpCall& call, std::chrono::milliseconds budget,
                   const std::stop_token& abandon, HttpReply& reply);

  HttpChannelOptions options_;
  std::string base_url_;
  // A call without a body sends no Content-Type (nor Expect): fewer headers to write and parse.
  CurlSlist body_headers_;
  CurlSlist bodiless_headers_;  // null when there is no token
  std::mutex mutex_;
  std::vector<std::unique_ptr<CurlHandle>> idle_;
};

}  // namespace memwire::sideband::http
