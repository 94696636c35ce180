// What is HTTP's own in HttpChannel, against a real HttpEndpoint and against servers that
// misbehave for real: URLs, retries, reply limits, the wire, bearer tokens and TLS. The cases
// every channel shares are in ../conformance/.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <latch>
#include <stop_token>
#include <thread>

#include "memwire/error_codes.hpp"
#include "memwire/sideband/http.hpp"
#include "support/error_code_of.hpp"
#include "support/http_channel_options.hpp"
#include "support/loopback.hpp"
#include "support/metadata_samples.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using namespace memwire::test_support;

TEST(HttpChannelErrors, SlowServerIsTimeoutNotNotFound) {
  test_support::SilentListener silent;
  HttpChannel channel(http_channel_options(silent.url()));
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { channel.fetch("x", 300ms); }), ErrorCode::Timeout);
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
  EXPECT_EQ(error_code_of([&] { channel.wait_for("x", 300ms); }), ErrorCode::Timeout);
}

TEST(HttpChannelErrors, NoServerIsTransportAfterBoundedRetries) {
  auto options = http_channel_options("http://127.0.0.1:" +
                                      std::to_string(test_support::free_loopback_port()));
  options.max_retries = 2;
  options.retry_backoff = 10ms;
  HttpChannel channel(options);
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { channel.fetch("x", 5s); }), ErrorCode::Transport);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);  // 10 + 20 ms of backoff
}

TEST(HttpChannelErrors, BadUrlIsInvalidArgument) {
  EXPECT_EQ(error_code_of([] { HttpChannel channel(http_channel_options("ftp://x")); }),
            ErrorCode::InvalidArgument);
}

TEST(HttpChannelErrors, RepliesLargerThanTheLimitFailAtOnce) {
  // A real HTTP server that answers with more than any metadata: declared (512 MiB) or endless
  // (chunked, no length). The client must stop at its limit, not fill its memory or time out.
  httplib::Server server;
  const std::string zeros(64 * 1024, '0');
  server.Get("/v1/metadata/declared", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content_provider(std::size_t{512} << 20, "application/json",
                             [&](std::size_t, std::size_t, httplib::DataSink& sink) {
                               return sink.write(zeros.data(), zeros.size());
                             });
  });
  server.Get("/v1/metadata/endless", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [&](std::size_t, httplib::DataSink& sink) {
      return sink.write(zeros.data(), zeros.size());
    });
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  {
    auto options = http_channel_options("http://127.0.0.1:" + std::to_string(port));
    options.max_reply_size = 1 << 20;
    HttpChannel channel(options);
    for (const char* name : {"declared", "endless"}) {
      const auto began = std::chrono::steady_clock::now();
      try {
        channel.fetch(name, 20s);
        ADD_FAILURE() << name;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Protocol) << name << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("larger than 1048576 bytes"), std::string::npos)
            << e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - began, 10s) << name;
    }
  }
  server.stop();
  thread.join();
  auto options = http_channel_options("http://127.0.0.1:1");
  options.max_reply_size = 0;
  EXPECT_EQ(error_code_of([&] { HttpChannel channel(options); }), ErrorCode::InvalidArgument);
}

TEST(HttpChannelWire, OneKeptHandleSendsEachCallAsItsOwn) {
  // A curl handle is reused without a reset: a GET after a PUT, a bodiless DELETE after a POST
  // must carry nothing of the call before. A real server records what arrives.
  struct Seen {
    std::string method, path, body, content_type, authorization;
  };
  std::mutex mutex;
  std::vector<Seen> seen;
  const std::string document = sample_metadata(4).to_json();
  httplib::Server server;
  auto record = [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    seen.push_back({req.method, req.path, req.body, req.get_header_value("Content-Type"),
                    req.get_header_value("Authorization")});
    if (req.method == "GET") res.set_content(document, "application/json");
    if (req.method == "POST") res.set_content(R"({"status":"done"})", "application/json");
    if (req.method == "PUT" || req.method == "DELETE") res.status = 204;
  };
  server.Get(".*", record);
  server.Put(".*", record);
  server.Post(".*", record);
  server.Delete(".*", record);
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  {
    HttpChannel channel(http_channel_options("http://127.0.0.1:" + std::to_string(port), "s3cret"));
    channel.publish("wire.a", sample_metadata(4), 0ms);
    EXPECT_EQ(channel.fetch("wire.a", 2s), sample_metadata(4));
    channel.request("wire.b", sample_metadata(5, OperationKind::Write), 2s);
    channel.withdraw("wire.a");
    EXPECT_EQ(channel.fetch("wire.a", 2s), sample_metadata(4));
  }
  server.stop();
  thread.join();
  std::lock_guard lock(mutex);
  ASSERT_EQ(seen.size(), 5u);
  const char* methods[] = {"PUT", "GET", "POST", "DELETE", "GET"};
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].method, methods[i]) << i;
    EXPECT_EQ(seen[i].authorization, "Bearer s3cret") << i;
    bool has_body = seen[i].method == "PUT" || seen[i].method == "POST";
    EXPECT_EQ(seen[i].body.empty(), !has_body) << i;
    EXPECT_EQ(seen[i].content_type, has_body ? "application/json" : "") << i;
  }
  EXPECT_EQ(seen[0].body, sample_metadata(4).to_json());
  EXPECT_EQ(seen[2].body, sample_metadata(5, OperationKind::Write).to_json());
  EXPECT_EQ(seen[3].path, "/v1/metadata/wire.a");
}

TEST(HttpChannelAuth, WrongOrMissingTokenIsAccessDenied) {
  HttpEndpointOptions options;
  options.token = "s3cret";
  HttpEndpoint endpoint(options);
  endpoint.start();
  HttpChannel right(http_channel_options(endpoint.url(), "s3cret"));
  HttpChannel wrong(http_channel_options(endpoint.url(), "guess"));
  HttpChannel none(http_channel_options(endpoint.url()));
  right.publish("private", sample_metadata(1), 0ms);
  EXPECT_EQ(right.fetch("private", 1s), sample_metadata(1));
  for (auto* channel : {&wrong, &none}) {
    EXPECT_EQ(error_code_of([&] { channel->fetch("private", 1s); }), ErrorCode::AccessDenied);
    EXPECT_EQ(error_code_of([&] { channel->publish("x", sample_metadata(2), 0ms); }),
              ErrorCode::AccessDenied);
    EXPECT_EQ(error_code_of([&] { channel->list(); }), ErrorCode::AccessDenied);
    EXPECT_EQ(error_code_of([&] { (void)channel->serve("svc", [](auto&, auto&) {}); }),
              ErrorCode::AccessDenied);
  }
}

TEST(HttpChannelTls, HttpsWithATrustedCertificate) {
  test_support::TempDir dir;
  auto key = dir.file("key.pem"), cert = dir.file("cert.pem");
  auto command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "the openssl command is not installed";
  HttpEndpointOptions options;
  options.cert_file = cert;
  options.key_file = key;
  HttpEndpoint endpoint(options);
  endpoint.start();
  ASSERT_EQ(endpoint.url().substr(0, 8), "https://");

  auto trusted = http_channel_options(endpoint.url());
  trusted.ca_file = cert;
  HttpChannel channel(trusted);
  channel.publish("secure", sample_metadata(1), 0ms);
  EXPECT_EQ(channel.fetch("secure", 2s), sample_metadata(1));

  // Without the CA the certificate is refused; plain HTTP to a TLS port fails too.
  HttpChannel untrusting(http_channel_options(endpoint.url()));
  EXPECT_EQ(error_code_of([&] { untrusting.fetch("secure", 2s); }), ErrorCode::Transport);
  HttpChannel plain(http_channel_options("http://127.0.0.1:" + std::to_string(endpoint.port())));
  EXPECT_NE(error_code_of([&] { plain.fetch("secure", 2s); }), ErrorCode::NotFound);
}

TEST(HttpChannelTls, BadCertificateFilesAreRefused) {
  HttpEndpointOptions options;
  options.cert_file = "/nonexistent/cert.pem";
  options.key_file = "/nonexistent/key.pem";
  EXPECT_EQ(error_code_of([&] { HttpEndpoint endpoint(options); }), ErrorCode::InvalidArgument);
  options.key_file.clear();
  EXPECT_EQ(error_code_of([&] { HttpEndpoint endpoint(options); }), ErrorCode::InvalidArgument);
}

}  // namespace
