// What one token may store at the HTTP registry (issue 36: one publish grant filled 426 MB), and
// a restart over a state file that is still being read: against a real memwire-registry process
// (or a real HttpEndpoint) and real clients (HttpChannel on libcurl, raw httplib requests).

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <fstream>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/sideband/http.hpp"
#include "support/error_code_of.hpp"
#include "support/http_channel_options.hpp"
#include "support/metadata_samples.hpp"
#include "support/registry_process.hpp"
#include "support/temp_dir.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using namespace memwire::test_support;

constexpr const char* kOwnerA = "owner-a-0123456789abcdef";
constexpr const char* kOwnerB = "owner-b-0123456789abcdef";

HttpChannel channel_at(const std::string& url, const char* token) {
  return HttpChannel(http_channel_options(url, token));
}

// The status and parsed body of a raw PUT, as any HTTP client sees it.
std::pair<int, json> raw_put(const std::string& url, const std::string& path,
                             const std::string& token, const std::string& body) {
  httplib::Client client(url);
  auto result = client.Put(path, {{"Authorization", "Bearer " + token}}, body, "application/json");
  if (!result) return {0, json()};
  return {result->status, json::parse(result->body, nullptr, false)};
}

// A grant file of two publishers, each on its own prefix.
std::string two_publishers(const TempDir& dir) {
  std::ofstream(dir.file("grants")) << kOwnerA << " publish a\n" << kOwnerB << " publish b\n";
  return dir.file("grants");
}

TEST(HttpQuota, ATokenHoldsAtMostMaxNamesAndReplacingOrWithdrawingFreesRoom) {
  TempDir dir;
  RegistryProcess registry(
      {"--grants", two_publishers(dir), "--max-names-per-grant", "3", "--state", dir.file("s")});
  auto owner_a = channel_at(registry.url(), kOwnerA);
  owner_a.publish("a.1", sample_metadata(1), 0ms);
  owner_a.publish("a.2", sample_metadata(2), 0ms);
  owner_a.publish("a.3", sample_metadata(3), 0ms);
  EXPECT_EQ(error_code_of([&] { owner_a.publish("a.4", sample_metadata(4), 0ms); }),
            ErrorCode::AccessDenied);
  // The answer names the limit and the flag that raises it.
  auto [status, body] =
      raw_put(registry.url(), "/v1/metadata/a.4", kOwnerA, sample_metadata(4).to_json());
  EXPECT_EQ(status, 403);
  ASSERT_TRUE(body.is_object()) << body;
  EXPECT_EQ(body.value("limit", ""), "max_names_per_grant") << body;
  EXPECT_EQ(body.value("flag", ""), "--max-names-per-grant") << body;
  EXPECT_EQ(body.value("used", 0), 3) << body;
  EXPECT_EQ(body.value("max", 0), 3) << body;
  EXPECT_NE(body.value("error", "").find("over quota"), std::string::npos) << body;
  // Replacing a name it holds takes no more room.
  owner_a.publish("a.1", sample_metadata(11), 0ms);
  // Another token counts its own names.
  auto owner_b = channel_at(registry.url(), kOwnerB);
  for (int i = 0; i < 3; ++i) owner_b.publish("b." + std::to_string(i), sample_metadata(20), 0ms);
  // Withdrawing frees a place; nothing refused was stored.
  EXPECT_EQ(error_code_of([&] { owner_a.fetch("a.4", 1s); }), ErrorCode::NotFound);
  owner_a.withdraw("a.2");
  owner_a.publish("a.4", sample_metadata(4), 0ms);
  EXPECT_EQ(owner_a.fetch("a.1", 1s).to_json(), sample_metadata(11).to_json());
}

TEST(HttpQuota, BytesCountTheNewDocumentOfAReplacedNameNotBoth) {
  const std::string small = sample_metadata(1).to_json();
  const std::string large = sample_metadata(2, OperationKind::Read, 6).to_json();
  ASSERT_GT(large.size(), small.size() + 100);
  // Room for a.1 and a large a.2, not for a small a.2 and a large one at once.
  const auto cost = [](const std::string& doc) { return std::string("a.1").size() + doc.size(); };
  const std::size_t quota = cost(small) + cost(large);
  TempDir dir;
  RegistryProcess registry(
      {"--grants", two_publishers(dir), "--max-bytes-per-grant", std::to_string(quota)});
  auto owner_a = channel_at(registry.url(), kOwnerA);
  owner_a.publish("a.1", sample_metadata(1), 0ms);
  owner_a.publish("a.2", sample_metadata(1), 0ms);
  owner_a.publish("a.2", sample_metadata(2, OperationKind::Read, 6), 0ms);
  auto [status, body] = raw_put(registry.url(), "/v1/metadata/a.3", kOwnerA, small);
  EXPECT_EQ(status, 403);
  EXPECT_EQ(body.value("limit", ""), "max_bytes_per_grant") << body;
  EXPECT_EQ(body.value("flag", ""), "--max-bytes-per-grant") << body;
  EXPECT_EQ(body.value("used", std::size_t{0}), quota) << body;
  EXPECT_EQ(body.value("max", std::size_t{0}), quota) << body;
  // The other token still has all of its room.
  auto owner_b = channel_at(registry.url(), kOwnerB);
  owner_b.publish("b.1", sample_metadata(2, OperationKind::Read, 6), 0ms);
  owner_b.publish("b.2", sample_metadata(1), 0ms);
}

TEST(HttpQuota, TheDefaultHolds1024NamesPerTokenOperationsAndPoolsTogether) {
  TempDir dir;
  RegistryProcess registry({"--grants", two_publishers(dir)});
  httplib::Client client(registry.url());  // one keep-alive connection for all the PUTs
  const httplib::Headers auth{{"Authorization", std::string("Bearer ") + kOwnerA}};
  const auto document = sample_metadata(1).to_json();
  for (int i = 0; i < 1024; ++i) {
    auto result =
        client.Put("/v1/metadata/a." + std::to_string(i), auth, document, "application/json");
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 204) << i << ": " << result->body;
  }
  auto result = client.Put("/v1/metadata/a.x", auth, document, "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 403) << result->body;
  EXPECT_EQ(json::parse(result->body, nullptr, false).value("limit", ""), "max_names_per_grant");
}

// What a token holds is known again after a restart: the state file records each name's owner
// (as a digest of its token, never the token).
TEST(HttpQuota, ARestartedRegistryStillCountsWhatEachTokenHolds) {
  TempDir dir;
  const auto grants = two_publishers(dir);
  const std::vector<std::string> flags{"--grants", grants,    "--max-names-per-grant",
                                       "2",        "--state", dir.file("state")};
  {
    RegistryProcess registry(flags);
    auto owner_a = channel_at(registry.url(), kOwnerA);
    owner_a.publish("a.1", sample_metadata(1), 0ms);
    owner_a.publish("a.2", sample_metadata(2), 0ms);
  }
  std::ifstream saved(dir.file("state"));
  const std::string text((std::istreambuf_iterator<char>(saved)), {});
  EXPECT_EQ(text.find(kOwnerA), std::string::npos) << "the state file holds a token";
  RegistryProcess registry(flags);
  auto owner_a = channel_at(registry.url(), kOwnerA);
  EXPECT_EQ(error_code_of([&] { owner_a.publish("a.3", sample_metadata(3), 0ms); }),
            ErrorCode::AccessDenied);
  owner_a.publish("a.2", sample_metadata(22), 0ms);
  channel_at(registry.url(), kOwnerB).publish("b.1", sample_metadata(4), 0ms);
}

// The embeddable endpoint takes the same limits from its options; without authentication all
// callers share them.
TEST(HttpQuota, EndpointOptionsLimitCallersWithoutAToken) {
  HttpEndpointOptions options;
  options.max_names_per_grant = 2;
  HttpEndpoint endpoint(options);
  endpoint.start();
  HttpChannelOptions at;
  at.url = endpoint.url();
  HttpChannel one(at);
  HttpChannel two(at);
  one.publish("x", sample_metadata(1), 0ms);
  two.publish("y", sample_metadata(2), 0ms);
  EXPECT_EQ(error_code_of([&] { two.publish("z", sample_metadata(3), 0ms); }),
            ErrorCode::AccessDenied);
  EXPECT_EQ(endpoint.size(), 2u);
}

// A restart over a large state file used to answer nothing until all of it was read (20 s for
// 426 MB). A FIFO stands for a file still being read: its reader waits until the test writes.
TEST(HttpRegistryLoading, HealthzAnswersAtOnceAndNamesWaitForTheStateFile) {
  TempDir dir;
  const auto path = dir.file("state");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const auto document = sample_metadata(1).to_json();
  // A name as an earlier registry left it, and one it withdrew (so that the file is rewritten
  // once read: a FIFO cannot be appended to).
  const auto state =
      json{{"op", "put"}, {"name", "gone"}, {"document", document}, {"expires_unix_ms", 0}}.dump() +
      "\n" + json{{"op", "erase"}, {"name", "gone"}}.dump() + "\n" +
      json{{"op", "put"}, {"name", "kept"}, {"document", document}, {"expires_unix_ms", 0}}.dump() +
      "\n";
  bool written = false;
  auto write_state = [&] {
    if (written) return;
    written = true;
    std::ofstream(path) << state;  // meets the reader, writes, closes: the reader sees the end
  };
  HttpEndpointOptions options;
  options.state_file = path;
  auto made = std::async(std::launch::async, [&] {
    auto endpoint = std::make_unique<HttpEndpoint>(options);
    endpoint->start();
    return endpoint;
  });
  const bool served_at_once = made.wait_for(5s) == std::future_status::ready;
  if (!served_at_once) write_state();  // lets the constructor finish either way
  auto endpoint = made.get();
  ASSERT_TRUE(served_at_once) << "the endpoint served nothing before its state file was read";
  std::shared_ptr<void> unblock(nullptr, [&](void*) { write_state(); });

  httplib::Client client(endpoint->url());
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(ready->body, "loading\n");
  // A fetch meanwhile waits for the names instead of answering 404.
  HttpChannelOptions at;
  at.url = endpoint->url();
  HttpChannel reader(at);
  auto fetched = std::async(std::launch::async, [&] { return reader.fetch("kept", 10s); });
  EXPECT_EQ(fetched.wait_for(300ms), std::future_status::timeout);
  write_state();
  EXPECT_EQ(fetched.get().to_json(), document);
  ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ready\n");
  EXPECT_EQ(endpoint->size(), 1u);
}

}  // namespace
}  // namespace memwire::sideband
