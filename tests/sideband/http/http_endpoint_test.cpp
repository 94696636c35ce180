// The endpoint's HTTP surface, spoken to by a plain HTTP client (cpp-httplib's).
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "memwire/error.hpp"
#include "memwire/sideband/http.hpp"
#include "support/metadata_samples.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using test_support::sample_metadata;

class HttpEndpointTest : public ::testing::Test {
 protected:
  HttpEndpointTest() : endpoint_(options()), client_("127.0.0.1", endpoint_.port()) {
    endpoint_.start();
  }
  static HttpEndpointOptions options() {
    HttpEndpointOptions o;
    o.ttl_sweep_interval = std::chrono::milliseconds(20);
    return o;
  }
  HttpEndpoint endpoint_;
  httplib::Client client_;
};

TEST_F(HttpEndpointTest, PutGetListDelete) {
  auto document = sample_metadata(1).to_json();
  auto put = client_.Put("/v1/metadata/a.b", document, "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 204);
  auto got = client_.Get("/v1/metadata/a.b");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(RdmaMetadata::from_json(got->body), sample_metadata(1));
  auto list = client_.Get("/v1/metadata");
  ASSERT_TRUE(list);
  EXPECT_EQ(nlohmann::json::parse(list->body)["names"], nlohmann::json::array({"a.b"}));
  EXPECT_EQ(client_.Delete("/v1/metadata/a.b")->status, 204);
  EXPECT_EQ(client_.Get("/v1/metadata/a.b")->status, 404);
  EXPECT_EQ(client_.Delete("/v1/metadata/a.b")->status, 404);
}

TEST_F(HttpEndpointTest, MalformedMetadataIsRefusedAndNotStored) {
  for (std::string body : std::vector<std::string>{"", "not json", "{}", R"({"version":1})",
                                                   "[1,2]", std::string(1000, '{')}) {
    auto put = client_.Put("/v1/metadata/bad", body, "application/json");
    ASSERT_TRUE(put);
    EXPECT_EQ(put->status, 400) << body;
    EXPECT_NE(put->body.find("error"), std::string::npos);
  }
  // A valid document with one unknown field is refused too: the codec is strict.
  auto json = nlohmann::json::parse(sample_metadata(2).to_json());
  json["extra"] = 1;
  EXPECT_EQ(client_.Put("/v1/metadata/bad", json.dump(), "application/json")->status, 400);
  EXPECT_EQ(client_.Get("/v1/metadata/bad")->status, 404);
}

TEST_F(HttpEndpointTest, BadNamesAndParametersAre400) {
  auto document = sample_metadata(1).to_json();
  EXPECT_EQ(client_.Put("/v1/metadata/a..b", document, "application/json")->status, 400);
  EXPECT_EQ(client_.Get("/v1/metadata/a%20b")->status, 400);
  EXPECT_EQ(client_.Put("/v1/metadata/a?ttl_ms=soon", document, "application/json")->status, 400);
  EXPECT_EQ(client_.Get("/v1/metadata/a?wait_ms=-1")->status, 400);
}

TEST_F(HttpEndpointTest, TtlByQueryOrHeaderExpires) {
  auto document = sample_metadata(1).to_json();
  EXPECT_EQ(client_.Put("/v1/metadata/q?ttl_ms=100", document, "application/json")->status, 204);
  httplib::Headers ttl{{"X-Memwire-TTL-Ms", "100"}};
  EXPECT_EQ(client_.Put("/v1/metadata/h", ttl, document, "application/json")->status, 204);
  EXPECT_EQ(client_.Put("/v1/metadata/forever", document, "application/json")->status, 204);
  EXPECT_EQ(client_.Get("/v1/metadata/q")->status, 200);
  EXPECT_EQ(client_.Get("/v1/metadata/h")->status, 200);
  // Letting time pass is the point of this test.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_EQ(client_.Get("/v1/metadata/q")->status, 404);
  EXPECT_EQ(client_.Get("/v1/metadata/h")->status, 404);
  EXPECT_EQ(client_.Get("/v1/metadata/forever")->status, 200);
  EXPECT_EQ(endpoint_.size(), 1u);
}

TEST_F(HttpEndpointTest, LongPollAnswersWhenPublishedOr504) {
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(client_.Get("/v1/metadata/later?wait_ms=100")->status, 504);
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(90));

  std::thread publisher([&] {
    httplib::Client other("127.0.0.1", endpoint_.port());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    other.Put("/v1/metadata/later", sample_metadata(3).to_json(), "application/json");
  });
  started = std::chrono::steady_clock::now();
  auto got = client_.Get("/v1/metadata/later?wait_ms=5000");
  auto took = std::chrono::steady_clock::now() - started;
  publisher.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_LT(took, std::chrono::seconds(2));  // woken by the publish, not by the wait's end
}

TEST_F(HttpEndpointTest, HealthAndMetrics) {
  EXPECT_EQ(client_.Get("/healthz")->status, 200);
  client_.Put("/v1/metadata/m", sample_metadata(1).to_json(), "application/json");
  client_.Get("/v1/metadata/nothing");
  auto metrics = client_.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  const auto& text = metrics->body;
  EXPECT_NE(text.find("# TYPE memwire_http_requests_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(memwire_http_requests_total{route="metadata",method="GET",code="404"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(memwire_http_request_duration_seconds_count{route="metadata"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("memwire_names 1"), std::string::npos) << text;
}

TEST(HttpEndpointAuth, BearerTokenRequiredExceptForHealth) {
  HttpEndpointOptions options;
  options.token = "s3cret";
  HttpEndpoint endpoint(options);
  endpoint.start();
  httplib::Client client("127.0.0.1", endpoint.port());
  EXPECT_EQ(client.Get("/healthz")->status, 200);
  EXPECT_EQ(client.Get("/v1/metadata")->status, 401);
  EXPECT_EQ(client.Get("/metrics")->status, 401);
  EXPECT_EQ(client.Get("/v1/metadata", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(client.Get("/v1/metadata", {{"Authorization", "Bearer s3cret"}})->status, 200);
}

TEST(HttpEndpointLifecycle, StopsWithLongPollsInFlightAndFreesThePort) {
  auto endpoint = std::make_unique<HttpEndpoint>();
  endpoint->start();
  auto port = endpoint->port();
  std::thread poller([port] {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(std::chrono::seconds(30));
    auto reply = client.Get("/v1/metadata/never?wait_ms=60000");
    // Released by stop(): an answer (503/504) or a closed connection, never a 60 s wait.
    EXPECT_TRUE(!reply || reply->status >= 500);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto started = std::chrono::steady_clock::now();
  endpoint.reset();
  poller.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  // The same port can be listened on again at once.
  HttpEndpointOptions again;
  again.port = port;
  EXPECT_NO_THROW({ const HttpEndpoint listening_again{again}; });
}

TEST(HttpEndpointLifecycle, StopWithoutStartAndBusyPort) {
  HttpEndpoint first;
  HttpEndpointOptions same;
  same.port = first.port();
  try {
    HttpEndpoint second(same);
    FAIL() << "bound a port in use";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Transport);
  }
  first.stop();
  first.stop();
}

}  // namespace
