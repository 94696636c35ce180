// HttpChannel against a real HttpEndpoint (and against servers that misbehave for real).
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
#include "support/loopback.hpp"
#include "support/metadata_samples.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using memwire::test_support::error_code_of;
using test_support::sample_metadata;

HttpChannelOptions channel_options(const std::string& url, std::string token = {}) {
  HttpChannelOptions options;
  options.url = url;
  options.token = std::move(token);
  return options;
}

class HttpChannelTest : public ::testing::Test {
 protected:
  HttpChannelTest() : endpoint_(endpoint_options()), channel_(channel_options(endpoint_.url())) {
    endpoint_.start();
  }
  static HttpEndpointOptions endpoint_options() {
    HttpEndpointOptions o;
    o.ttl_sweep_interval = 20ms;
    o.threads = 256;
    return o;
  }
  HttpEndpoint endpoint_;
  HttpChannel channel_;
};

TEST_F(HttpChannelTest, PublishFetchListWithdraw) {
  channel_.publish("emb.req-1", sample_metadata(1), 0ms);
  channel_.publish("emb.req-2", sample_metadata(2), 0ms);
  EXPECT_EQ(channel_.fetch("emb.req-1", 1s), sample_metadata(1));
  EXPECT_EQ(channel_.list(), (std::vector<std::string>{"emb.req-1", "emb.req-2"}));
  channel_.publish("emb.req-1", sample_metadata(7), 0ms);  // replaces
  EXPECT_EQ(channel_.fetch("emb.req-1", 1s), sample_metadata(7));
  channel_.withdraw("emb.req-1");
  EXPECT_EQ(error_code_of([&] { channel_.fetch("emb.req-1", 1s); }), ErrorCode::NotFound);
  EXPECT_NO_THROW(channel_.withdraw("emb.req-1"));  // idempotent
  EXPECT_EQ(channel_.list(), (std::vector<std::string>{"emb.req-2"}));
}

TEST_F(HttpChannelTest, InvalidNamesNeverReachTheWire) {
  EXPECT_EQ(error_code_of([&] { channel_.publish("a/b", sample_metadata(1), 0ms); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { channel_.fetch("", 1s); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)channel_.serve("a..b", [](auto&, auto&) {}); }),
            ErrorCode::InvalidArgument);
}

TEST_F(HttpChannelTest, UnknownNameIsNotFoundAtOnce) {
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { channel_.fetch("nobody.home", 10s); }), ErrorCode::NotFound);
  EXPECT_LT(std::chrono::steady_clock::now() - started,
            3s);  // not the timeout (sanitizers are slow)
}

TEST(HttpChannelErrors, SlowServerIsTimeoutNotNotFound) {
  test_support::SilentListener silent;
  HttpChannel channel(channel_options(silent.url()));
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { channel.fetch("x", 300ms); }), ErrorCode::Timeout);
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
  EXPECT_EQ(error_code_of([&] { channel.wait_for("x", 300ms); }), ErrorCode::Timeout);
}

TEST(HttpChannelErrors, NoServerIsTransportAfterBoundedRetries) {
  auto options =
      channel_options("http://127.0.0.1:" + std::to_string(test_support::free_loopback_port()));
  options.max_retries = 2;
  options.retry_backoff = 10ms;
  HttpChannel channel(options);
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { channel.fetch("x", 5s); }), ErrorCode::Transport);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);  // 10 + 20 ms of backoff
}

TEST(HttpChannelErrors, BadUrlIsInvalidArgument) {
  EXPECT_EQ(error_code_of([] { HttpChannel channel(channel_options("ftp://x")); }),
            ErrorCode::InvalidArgument);
}

TEST(HttpChannelErrors, GarbageUnderANameIsInvalidMetadata) {
  // A real HTTP server that stores garbage (an older or foreign registry, a corrupted store).
  httplib::Server server;
  server.Get(R"(/v1/metadata/(.+))", [](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] == "json")
      res.set_content(R"({"version":1,"garbage":true})", "application/json");
    if (req.matches[1] == "text") res.set_content("<html>hello</html>", "text/html");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  {
    HttpChannel channel(channel_options("http://127.0.0.1:" + std::to_string(port)));
    for (const char* name : {"json", "text"}) {
      try {
        channel.fetch(name, 2s);
        ADD_FAILURE() << name;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidMetadata);
        EXPECT_NE(std::string(e.what()).find(std::string("metadata under '") + name),
                  std::string::npos)
            << e.what();
      }
    }
  }  // closes its kept-alive connection, so that stop() need not wait for it
  server.stop();
  thread.join();
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
    auto options = channel_options("http://127.0.0.1:" + std::to_string(port));
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
  auto options = channel_options("http://127.0.0.1:1");
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
    HttpChannel channel(channel_options("http://127.0.0.1:" + std::to_string(port), "s3cret"));
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

TEST_F(HttpChannelTest, TtlExpiryMakesTheNameUnknown) {
  channel_.publish("short", sample_metadata(1), 100ms);
  EXPECT_EQ(channel_.fetch("short", 1s), sample_metadata(1));
  std::this_thread::sleep_for(250ms);  // the TTL must run out: waiting is the test
  EXPECT_EQ(error_code_of([&] { channel_.fetch("short", 1s); }), ErrorCode::NotFound);
  EXPECT_TRUE(channel_.list().empty());
}

TEST_F(HttpChannelTest, WaitForReturnsWhenPublished) {
  auto waiter = std::async(std::launch::async, [&] {
    auto started = std::chrono::steady_clock::now();
    auto metadata = channel_.wait_for("appears.later", 10s);
    return std::make_pair(metadata, std::chrono::steady_clock::now() - started);
  });
  std::this_thread::sleep_for(100ms);
  HttpChannel publisher(channel_options(endpoint_.url()));
  auto published = std::chrono::steady_clock::now();
  publisher.publish("appears.later", sample_metadata(5), 0ms);
  auto [metadata, took] = waiter.get();
  EXPECT_EQ(metadata, sample_metadata(5));
  EXPECT_LT(std::chrono::steady_clock::now() - published, 1s);
  EXPECT_LT(took, 5s);
}

TEST_F(HttpChannelTest, WaitForTimesOutAndSeesNoWithdrawnName) {
  channel_.publish("gone", sample_metadata(1), 0ms);
  channel_.withdraw("gone");
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { channel_.wait_for("gone", 200ms); }), ErrorCode::Timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 190ms);
}

// A caller that gives up stops its long poll within about a second (curl's progress tick).
TEST_F(HttpChannelTest, AbandonedWaitEndsEarly) {
  std::stop_source abandon;
  auto waiter = std::async(std::launch::async, [&] {
    return error_code_of([&] { channel_.wait_for("never.there", 30s, abandon.get_token()); });
  });
  std::this_thread::sleep_for(200ms);
  const auto start = std::chrono::steady_clock::now();
  abandon.request_stop();
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(HttpChannelAuth, WrongOrMissingTokenIsAccessDenied) {
  HttpEndpointOptions options;
  options.token = "s3cret";
  HttpEndpoint endpoint(options);
  endpoint.start();
  HttpChannel right(channel_options(endpoint.url(), "s3cret"));
  HttpChannel wrong(channel_options(endpoint.url(), "guess"));
  HttpChannel none(channel_options(endpoint.url()));
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

  auto trusted = channel_options(endpoint.url());
  trusted.ca_file = cert;
  HttpChannel channel(trusted);
  channel.publish("secure", sample_metadata(1), 0ms);
  EXPECT_EQ(channel.fetch("secure", 2s), sample_metadata(1));

  // Without the CA the certificate is refused; plain HTTP to a TLS port fails too.
  HttpChannel untrusting(channel_options(endpoint.url()));
  EXPECT_EQ(error_code_of([&] { untrusting.fetch("secure", 2s); }), ErrorCode::Transport);
  HttpChannel plain(channel_options("http://127.0.0.1:" + std::to_string(endpoint.port())));
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

TEST_F(HttpChannelTest, RequestReplyRoundTrip) {
  std::mutex mutex;
  std::vector<std::pair<std::string, RdmaMetadata>> seen;
  auto subscription = channel_.serve("svc", [&](const std::string& name, const RdmaMetadata& md) {
    std::lock_guard lock(mutex);
    seen.emplace_back(name, md);
  });
  HttpChannel requester(channel_options(endpoint_.url()));
  auto writable = sample_metadata(3, OperationKind::Write);
  requester.request("svc.tensor.1", writable, 2s);
  requester.request("svc", writable, 2s);
  std::lock_guard lock(mutex);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, "svc.tensor.1");
  EXPECT_EQ(seen[0].second, writable);
  EXPECT_EQ(seen[1].first, "svc");
}

TEST_F(HttpChannelTest, RequestErrors) {
  auto writable = sample_metadata(3, OperationKind::Write);
  // Nobody serves the name; "svcx" is not under "svc".
  auto subscription = channel_.serve("svc", [](const std::string& name, const RdmaMetadata&) {
    if (name == "svc.missing") throw Error(ErrorCode::NotFound, "no tensor svc.missing here");
    if (name == "svc.small") throw Error(ErrorCode::SizeMismatch, "64 bytes wanted");
  });
  EXPECT_EQ(error_code_of([&] { channel_.request("other", writable, 1s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { channel_.request("svcx", writable, 1s); }), ErrorCode::NotFound);
  // The owner's error comes back with its code and message.
  try {
    channel_.request("svc.small", writable, 2s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::SizeMismatch);
    EXPECT_NE(std::string(e.what()).find("64 bytes wanted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_code_of([&] { channel_.request("svc.missing", writable, 2s); }),
            ErrorCode::NotFound);
  // Readable metadata is no request.
  EXPECT_EQ(error_code_of([&] { channel_.request("svc.x", sample_metadata(1), 1s); }),
            ErrorCode::Pairing);
}

// Every code an owner throws reaches the requester as that code, its message once (no code text
// folded into it on the way).
TEST_F(HttpChannelTest, EveryOwnerErrorCodeCrossesTheWire) {
  auto subscription = channel_.serve("code", [](const std::string& name, const RdmaMetadata&) {
    const auto code = kAllErrorCodes.at(std::stoul(name.substr(name.rfind('.') + 1)));
    throw Error(code, "thrown as " + std::string(error_code_name(code)));
  });
  for (std::size_t i = 0; i < kAllErrorCodes.size(); ++i) {
    const auto name = "code." + std::to_string(i);
    try {
      channel_.request(name, sample_metadata(3, OperationKind::Write), 2s);
      ADD_FAILURE() << name << ": request returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kAllErrorCodes[i]) << e.what();
      // The endpoint answers NotFound and Timeout with their HTTP statuses, the rest as the
      // owner's reply: either way the owner's message ends it, once.
      const std::string thrown = "': thrown as " + std::string(error_code_name(kAllErrorCodes[i]));
      EXPECT_TRUE(e.message().ends_with(name + thrown)) << e.message();
      EXPECT_EQ(e.message().find(std::string(to_string(kAllErrorCodes[i])) + ": "),
                std::string_view::npos)
          << e.message();
    }
  }
}

TEST_F(HttpChannelTest, SlowOwnerIsTimeoutAndTheServingEndsCleanly) {
  std::promise<void> release;
  auto released = release.get_future().share();
  auto subscription = channel_.serve(
      "slow", [released](const std::string&, const RdmaMetadata&) { released.wait(); });
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] {
              channel_.request("slow.x", sample_metadata(1, OperationKind::Write), 300ms);
            }),
            ErrorCode::Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  release.set_value();
  subscription.reset();  // joins its pollers promptly
  EXPECT_EQ(error_code_of([&] {
              channel_.request("slow.x", sample_metadata(1, OperationKind::Write), 300ms);
            }),
            ErrorCode::NotFound);
}

// A stop on the request's token ends the wait long before its timeout: Error{Cancelled}.
TEST_F(HttpChannelTest, AbandonedRequestEndsBeforeItsTimeout) {
  std::promise<void> release;
  auto released = release.get_future().share();
  auto subscription = channel_.serve(
      "slow", [released](const std::string&, const RdmaMetadata&) { released.wait(); });
  std::stop_source abandon;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    abandon.request_stop();
  });
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] {
              channel_.request("slow.x", sample_metadata(1, OperationKind::Write), 20s,
                               abandon.get_token());
            }),
            ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);  // not the 20 s timeout
  stopper.join();
  release.set_value();
}

TEST_F(HttpChannelTest, HundredNamesPublishedAndFetchedConcurrently) {
  constexpr int kNames = 100;
  HttpChannel fetcher(channel_options(endpoint_.url()));
  std::latch start(2 * kNames);
  std::vector<std::future<void>> publishers, fetchers;
  for (int i = 0; i < kNames; ++i) {
    fetchers.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      EXPECT_EQ(fetcher.wait_for("many." + std::to_string(i), 20s), sample_metadata(i));
    }));
    publishers.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      channel_.publish("many." + std::to_string(i), sample_metadata(i), 0ms);
    }));
  }
  for (auto& f : publishers) f.get();
  for (auto& f : fetchers) f.get();
  EXPECT_EQ(channel_.list().size(), static_cast<std::size_t>(kNames));
}

}  // namespace
