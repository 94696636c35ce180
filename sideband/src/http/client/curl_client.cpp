#include "http/client/curl_client.hpp"

#include <algorithm>
#include <thread>

#include "channel_rules.hpp"
#include "memwire/error.hpp"

namespace memwire::sideband::http {
namespace {

using std::chrono::milliseconds;

constexpr std::size_t kMaxIdleHandles = 16;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw Error(ErrorCode::Transport, "curl_global_init failed");
    }
  });
}

// libcurl's receive buffer: a metadata document of thousands of descriptors (~100 KB) arrives
// in one or two reads and appends instead of seven of the default 16 KiB.
constexpr long kReceiveBuffer = 128 * 1024;

// Where a reply's body goes, up to its limit.
struct ReplySink {
  CURL* easy = nullptr;
  std::string* body = nullptr;
  std::size_t limit = 0;
  bool too_large = false;
};

std::size_t append_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto& sink = *static_cast<ReplySink*>(user);
  const std::size_t length = size * count;
  if (length > sink.limit - sink.body->size()) {
    sink.too_large = true;
    return 0;  // not all taken: libcurl ends the transfer (CURLE_WRITE_ERROR)
  }
  if (sink.body->empty()) {  // one allocation for a body whose length was declared
    curl_off_t declared = -1;
    if (curl_easy_getinfo(sink.easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared) == CURLE_OK &&
        declared > 0)
      sink.body->reserve(std::min(static_cast<std::size_t>(declared), sink.limit));
  }
  sink.body->append(data, length);
  return length;
}

// libcurl calls this often during a transfer (about once a second while it waits): a non-zero
// return aborts the transfer with CURLE_ABORTED_BY_CALLBACK.
int abort_when_abandoned(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::stop_token*>(user)->stop_requested() ? 1 : 0;
}

bool is_connect_failure(CURLcode code) {
  return code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST;
}

// Failures after the request may have been sent: only idempotent calls are repeated.
bool is_broken_exchange(CURLcode code) {
  return code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR || code == CURLE_GOT_NOTHING;
}

bool is_retryable_status(long status) { return status == 500 || status == 502 || status == 503; }

}  // namespace

CurlClient::CurlClient(const HttpChannelOptions& options) : options_(options) {
  global_init();
  base_url_ = options_.url;
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
  if (!base_url_.starts_with("http://") && !base_url_.starts_with("https://")) {
    throw Error(
        ErrorCode::InvalidArgument,
        "HTTP endpoint URL must start with http:// or https://, got '" + options_.url + "'");
  }
  if (options_.max_reply_size == 0)
    throw Error(ErrorCode::InvalidArgument, "HTTP max_reply_size must be at least one byte");
  auto add = [](CurlSlist& list, const std::string& header) {
    auto* longer = curl_slist_append(list.get(), header.c_str());
    if (!longer) throw Error(ErrorCode::Transport, "out of memory building HTTP headers");
    (void)list.release();
    list.reset(longer);
  };
  add(body_headers_, "Content-Type: application/json");
  add(body_headers_, "Expect:");  // no 100-continue round trip before small bodies
  if (!options_.token.empty()) {
    add(body_headers_, "Authorization: Bearer " + options_.token);
    add(bodiless_headers_, "Authorization: Bearer " + options_.token);
  }
}

std::unique_ptr<CurlHandle> CurlClient::make_handle() const {
  auto handle = std::make_unique<CurlHandle>();
  handle->easy.reset(curl_easy_init());
  if (!handle->easy) throw Error(ErrorCode::Transport, "curl_easy_init failed");
  CURL* h = handle->easy.get();
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, handle->error);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, kReceiveBuffer);
  // A declared length over the limit fails before any of the body is read.
  curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options_.max_reply_size));
  if (!options_.user.empty()) {
    curl_easy_setopt(h, CURLOPT_USERNAME, options_.user.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, options_.password.c_str());
  }
  if (!options_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, options_.verify_peer ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, options_.verify_peer ? 2L : 0L);
  return handle;
}

std::unique_ptr<CurlHandle> CurlClient::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      auto handle = std::move(idle_.back());
      idle_.pop_back();
      return handle;
    }
  }
  return make_handle();
}

void CurlClient::release(std::unique_ptr<CurlHandle> handle) {
  std::lock_guard lock(mutex_);
  if (idle_.size() < kMaxIdleHandles) idle_.push_back(std::move(handle));
}

CURLcode CurlClient::attempt(CurlHandle& handle, const HttpCall& call, milliseconds budget,
                             const std::stop_token& abandon, HttpReply& reply) {
  // No curl_easy_reset: the fixed options stay from make_handle(), and every option that
  // differs between calls (URL, timeouts, method, body, headers) is set here each time.
  CURL* h = handle.easy.get();
  std::string url = base_url_ + call.target;
  auto connect = std::min(options_.connect_timeout, budget);
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::max<long>(1, connect.count())));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long>(1, budget.count())));
  ReplySink sink{h, &reply.body, options_.max_reply_size};
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  std::string_view method = call.method;
  bool has_body = method != "GET" && (method != "DELETE" || !call.body.empty());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, has_body ? body_headers_.get() : bodiless_headers_.get());
  if (has_body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, call.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body.size()));
  } else {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);  // undoes a previous call's body
  }
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST,
                   method == "GET" || method == "POST" ? nullptr : call.method);
  if (abandon.stop_possible()) {
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_when_abandoned);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &abandon);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  } else {
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 1L);  // undoes a previous call's callback
  }
  reply.body.clear();
  handle.error[0] = '\0';
  CURLcode code = curl_easy_perform(h);
  if (sink.too_large) code = CURLE_FILESIZE_EXCEEDED;
  if (code == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply.status);
  return code;
}

HttpReply CurlClient::perform(const HttpCall& call, std::stop_token abandon) {
  const channel_rules::Deadline deadline(call.timeout);
  auto backoff = options_.retry_backoff;
  auto handle = acquire();
  std::string last_error;
  auto where = [&] { return std::string(call.method) + " " + base_url_ + call.target; };
  for (int tries = 0;; ++tries) {
    const auto budget = deadline.left();
    if (budget.count() <= 0) {
      throw Error(ErrorCode::Timeout, where() + ": no answer in time" +
                                          (last_error.empty() ? "" : " (" + last_error + ")"));
    }
    HttpReply reply;
    CURLcode code = attempt(*handle, call, budget, abandon, reply);
    bool retry;
    if (code == CURLE_OK) {
      retry = call.idempotent && is_retryable_status(reply.status);
      if (!retry || tries >= options_.max_retries) {
        release(std::move(handle));
        return reply;
      }
      last_error = "HTTP " + std::to_string(reply.status);
    } else {
      if (code == CURLE_FILESIZE_EXCEEDED) {  // the handle is dropped: its exchange broke off
        throw Error(ErrorCode::Protocol, where() + ": the reply is larger than " +
                                             std::to_string(options_.max_reply_size) +
                                             " bytes (max_reply_size)");
      }
      if (code == CURLE_ABORTED_BY_CALLBACK) {
        // The connection may be mid-exchange: this handle is not kept.
        throw Error(ErrorCode::Cancelled, where() + ": abandoned before the answer came");
      }
      last_error = handle->error[0] ? handle->error : curl_easy_strerror(code);
      // A timeout with budget left was the connect timeout: the server was never reached.
      // Without budget left, the loop's head reports the timeout.
      retry = is_connect_failure(code) || code == CURLE_OPERATION_TIMEDOUT ||
              (call.idempotent && is_broken_exchange(code));
      // A handle whose exchange broke may hold a dead connection: the next try starts afresh.
      handle = make_handle();
      if (code == CURLE_OPERATION_TIMEDOUT &&
          (deadline.passed() || tries >= options_.max_retries)) {
        throw Error(ErrorCode::Timeout, where() + ": " + last_error);
      }
      if (!retry || tries >= options_.max_retries) {
        throw Error(ErrorCode::Transport, "cannot reach " + where() + ": " + last_error);
      }
    }
    // A deliberate pause between tries, not a wait for a state change.
    auto pause = std::min(backoff, deadline.left());
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    backoff *= 2;
  }
}

}  // namespace memwire::sideband::http
