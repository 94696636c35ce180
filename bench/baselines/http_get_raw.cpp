// Baseline: raw cpp-httplib server + libcurl GET, no memwire. The server answers
// GET /v1/metadata/bench.live with the bytes memwire's endpoint would; the client reuses one
// curl handle (so one keep-alive connection) with TCP_NODELAY, as memwire's HttpChannel does.
//
//   http_get_raw [--iterations 2000]
//
// Prints one line and, on its last line, the same as JSON (microseconds).
#include <curl/curl.h>
#include <httplib.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench_support.hpp"
#include "sample_metadata.hpp"

namespace {

using namespace memwire::bench;

struct CurlDeleter {
  void operator()(CURL* handle) const { curl_easy_cleanup(handle); }
};

std::size_t append(char* data, std::size_t size, std::size_t count, void* body) {
  static_cast<std::string*>(body)->append(data, size * count);
  return size * count;
}

// Serves on its own thread for as long as it lives.
class Server {
 public:
  explicit Server(std::string body) : body_(std::move(body)) {
    server_.Get("/v1/metadata/bench.live", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(body_, "application/json");
    });
    // Connection reuse needs the server's keep-alive cap (5 requests by default) lifted.
    server_.set_tcp_nodelay(true);
    server_.set_keep_alive_max_count(100000);
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("cannot bind the httplib server");
    // Bound and listening already: early connects wait in the backlog until accept starts.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Server() {
    server_.stop();
    thread_.join();
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  int port() const { return port_; }

 private:
  std::string body_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

void run(LatencyOptions& given) {
  const int iterations = given.iterations;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const std::string document = sample_metadata().to_json();
  Server server(document);
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) throw std::runtime_error("curl_easy_init");
  const std::string url =
      "http://127.0.0.1:" + std::to_string(server.port()) + "/v1/metadata/bench.live";
  std::string body;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  auto get = [&] {
    body.clear();
    if (curl_easy_perform(curl.get()) != CURLE_OK) throw std::runtime_error("GET failed");
    long status = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
    if (status != 200 || body.size() != document.size())
      throw std::runtime_error("unexpected reply " + std::to_string(status));
  };
  const auto s = latency_us(iterations, iterations / 10 + 1, get);  // warm-ups as memwire's
  std::printf("raw httplib + curl GET  p50 %7.1f us  p99 %7.1f us  (%zu B body)\n", s.median, s.p99,
              document.size());
  nlohmann::json report = {{"body_bytes", document.size()},
                           {"get",
                            {{"p50_us", s.median},
                             {"p90_us", s.p90},
                             {"p99_us", s.p99},
                             {"min_us", s.min},
                             {"max_us", s.max},
                             {"samples", s.count}}}};
  curl.reset();
  std::printf("%s\n", nlohmann::json{{"http_raw", report}}.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) { return latency_main(argc, argv, "http_get_raw", false, run); }
