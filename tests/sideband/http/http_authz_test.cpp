// Bearer tokens scoped to a role and a name prefix (memwire-registry --grants), against a real
// memwire-registry process and real HTTP clients: each way a token could reach past its grant
// is refused with 403, and the owner's names stay as the owner left them.

#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>

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
using namespace memwire::test_support;

constexpr const char* kOwnerA = "owner-a-0123456789abcdef";
constexpr const char* kOwnerB = "owner-b-0123456789abcdef";
constexpr const char* kReader = "reader-0123456789abcdef";
constexpr const char* kAdmin = "admin-token-full-access";

class HttpGrants : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_.file("grants")) << "# who may do what\n"
                                       << kOwnerA << " publish a\n"
                                       << kOwnerB << "\tpublish b\r\n"
                                       << "\n"
                                       << kReader << " read *\n";
    registry_ = std::make_unique<RegistryProcess>(
        std::vector<std::string>{"--token", kAdmin, "--grants", dir_.file("grants")});
  }
  HttpChannel channel(const char* token) {
    return HttpChannel(http_channel_options(registry_->url(), token));
  }
  // The status and body of a raw request with `token`.
  std::pair<int, std::string> raw(const std::string& method, const std::string& path,
                                  const std::string& token, const std::string& body = "") {
    httplib::Client client(registry_->url());
    httplib::Headers headers{{"Authorization", "Bearer " + token}};
    auto result = method == "PUT"      ? client.Put(path, headers, body, "application/json")
                  : method == "POST"   ? client.Post(path, headers, body, "application/json")
                  : method == "DELETE" ? client.Delete(path, headers)
                                       : client.Get(path, headers);
    if (!result) return {0, ""};
    return {result->status, result->body};
  }

  TempDir dir_;
  std::unique_ptr<RegistryProcess> registry_;
};

TEST_F(HttpGrants, OwnerPublishesUnderItsPrefixOnly) {
  auto owner_a = channel(kOwnerA);
  owner_a.publish("a", sample_metadata(1), 0ms);
  owner_a.publish("a.x.y", sample_metadata(2), 0ms);
  EXPECT_EQ(error_code_of([&] { owner_a.publish("b.x", sample_metadata(3), 0ms); }),
            ErrorCode::AccessDenied);
  // "ab" is not below "a".
  EXPECT_EQ(error_code_of([&] { owner_a.publish("ab.x", sample_metadata(3), 0ms); }),
            ErrorCode::AccessDenied);
  auto [status, body] = raw("PUT", "/v1/metadata/b.x", kOwnerA, sample_metadata(3).to_json());
  EXPECT_EQ(status, 403);
  EXPECT_NE(body.find("limited to the prefix 'a'"), std::string::npos) << body;
  // Nothing of b's was stored; a's names were.
  auto reader = channel(kReader);
  EXPECT_EQ(reader.list(), (std::vector<std::string>{"a", "a.x.y"}));
  EXPECT_EQ(reader.fetch("a.x.y", 2s), sample_metadata(2));
}

TEST_F(HttpGrants, OwnerCannotOverwriteOrWithdrawAnotherOwnersName) {
  auto owner_b = channel(kOwnerB);
  owner_b.publish("b.x", sample_metadata(7), 0ms);
  auto owner_a = channel(kOwnerA);
  EXPECT_EQ(error_code_of([&] { owner_a.publish("b.x", sample_metadata(8), 0ms); }),
            ErrorCode::AccessDenied);
  EXPECT_EQ(raw("DELETE", "/v1/metadata/b.x", kOwnerA).first, 403);
  EXPECT_EQ(error_code_of([&] { owner_a.withdraw("b.x"); }), ErrorCode::AccessDenied);
  EXPECT_EQ(channel(kReader).fetch("b.x", 2s), sample_metadata(7));
}

TEST_F(HttpGrants, OwnerCannotRegisterAWiderOrForeignServePrefix) {
  auto owner_a = channel(kOwnerA);
  for (const char* prefix : {"", "b", "ab"}) {
    auto [status, body] =
        raw("POST", "/v1/servers", kOwnerA, std::string("{\"prefix\": \"") + prefix + "\"}");
    EXPECT_EQ(status, 403) << "prefix '" << prefix << "': " << body;
  }
  EXPECT_EQ(error_code_of([&] { auto s = owner_a.serve("", [](auto&&...) {}); }),
            ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { auto s = owner_a.serve("b", [](auto&&...) {}); }),
            ErrorCode::AccessDenied);
  // Its own prefix and below it are fine; a reader's request then reaches a's server, and one
  // for b's names finds no server (none could be registered for them).
  auto own = owner_a.serve("a.x", [](auto&&...) {});
  auto [status, body] = raw("POST", "/v1/servers", kOwnerA, R"({"prefix": "a"})");
  EXPECT_EQ(status, 200) << body;
  auto reader = channel(kReader);
  EXPECT_EQ(
      error_code_of([&] { reader.request("b.y", sample_metadata(1, OperationKind::Write), 2s); }),
      ErrorCode::NotFound);
}

TEST_F(HttpGrants, ReadTokenMayOnlyRead) {
  channel(kOwnerA).publish("a.x", sample_metadata(4), 0ms);
  auto reader = channel(kReader);
  EXPECT_EQ(reader.fetch("a.x", 2s), sample_metadata(4));
  EXPECT_EQ(error_code_of([&] { reader.publish("a.y", sample_metadata(5), 0ms); }),
            ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { reader.withdraw("a.x"); }), ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { auto s = reader.serve("a", [](auto&&...) {}); }),
            ErrorCode::AccessDenied);
  auto [status, body] = raw("PUT", "/v1/metadata/a.y", kReader, sample_metadata(5).to_json());
  EXPECT_EQ(status, 403);
  EXPECT_NE(body.find("may only read"), std::string::npos) << body;
  // Nor may it poll or answer another's server (knowing its id or not).
  EXPECT_EQ(raw("GET", "/v1/servers/0123456789abcdef0123456789abcdef/requests", kReader).first,
            403);
  EXPECT_EQ(
      raw("POST", "/v1/requests/0123456789abcdef/reply", kReader, R"({"status":"done"})").first,
      403);
  EXPECT_EQ(reader.list(), std::vector<std::string>{"a.x"});
  EXPECT_EQ(reader.fetch("a.x", 2s), sample_metadata(4));
}

// A request server's id and the ids of the requests it takes travel in URLs and logs. Before,
// any publish token that learned one could poll that server (taking requests meant for its
// owner, with their writable metadata) or answer them. Now only the token that registered the
// server (or the plain --token) may.
TEST_F(HttpGrants, AServerAndItsRequestsAnswerOnlyToTheTokenThatRegisteredIt) {
  auto [registered, created] = raw("POST", "/v1/servers", kOwnerA, R"({"prefix": "a"})");
  ASSERT_EQ(registered, 200) << created;
  const std::string id = nlohmann::json::parse(created)["id"].get<std::string>();
  const std::string requests = "/v1/servers/" + id + "/requests?wait_ms=200";

  auto reader = channel(kReader);
  auto asked = std::async(std::launch::async, [&]() -> std::string {
    try {
      reader.request("a.x", sample_metadata(1, OperationKind::Write), 10s);
      return "answered";
    } catch (const Error& error) {
      return error.what();
    }
  });
  // Another publish token that knows the id may not take the request.
  for (int i = 0; i < 5; ++i) {
    auto [status, body] = raw("GET", requests, kOwnerB);
    EXPECT_EQ(status, 403) << body;
    EXPECT_EQ(body.find("a.x"), std::string::npos) << "b took a's request: " << body;
  }
  EXPECT_EQ(raw("DELETE", "/v1/servers/" + id, kOwnerB).first, 403);
  // The owner takes it; b, now knowing the request's id, may not answer it either.
  std::string request_id;
  for (int i = 0; i < 50 && request_id.empty(); ++i) {
    auto [status, body] = raw("GET", requests, kOwnerA);
    ASSERT_EQ(status, 200) << body;
    auto taken = nlohmann::json::parse(body)["requests"];
    if (!taken.empty()) request_id = taken[0]["id"].get<std::string>();
  }
  ASSERT_FALSE(request_id.empty()) << "the owner never got the request";
  const std::string reply = "/v1/requests/" + request_id + "/reply";
  auto [refused, why] = raw("POST", reply, kOwnerB, R"({"status":"error","code":"not found"})");
  EXPECT_EQ(refused, 403) << why;
  EXPECT_NE(why.find("another token registered"), std::string::npos) << why;
  EXPECT_EQ(raw("POST", reply, kOwnerA, R"({"status":"done"})").first, 204);
  EXPECT_EQ(asked.get(), "answered");
  // The plain --token may still act for every server.
  EXPECT_EQ(raw("GET", requests, kAdmin).first, 200);
  EXPECT_EQ(raw("DELETE", "/v1/servers/" + id, kAdmin).first, 204);
}

TEST_F(HttpGrants, PlainTokenKeepsFullAccessAndUnknownTokensAreRefused) {
  auto admin = channel(kAdmin);
  admin.publish("z.anything", sample_metadata(9), 0ms);
  auto everything = admin.serve("", [](auto&&...) {});
  admin.withdraw("z.anything");
  EXPECT_EQ(raw("GET", "/v1/metadata", "owner-a-0123456789abcdeX").first, 401);
  EXPECT_EQ(raw("GET", "/v1/metadata", "").first, 401);
}

TEST(HttpGrantFile, HostileFilesAreRefused) {
  auto refused = [](const std::string& text) {
    return error_code_of([&] { parse_http_grants(text); }) == ErrorCode::InvalidArgument;
  };
  EXPECT_TRUE(refused("short read *\n"));
  EXPECT_TRUE(refused("0123456789abcdef write a\n"));
  EXPECT_TRUE(refused("0123456789abcdef read a..b\n"));
  EXPECT_TRUE(refused("0123456789abcdef read\n"));
  EXPECT_TRUE(refused("0123456789abcdef read a extra\n"));
  EXPECT_TRUE(refused("0123456789abcdef read a\n0123456789abcdef publish b\n"));
  EXPECT_TRUE(refused(std::string("0123456789abcdef\x01 read a\n")));
  EXPECT_TRUE(refused("0123456789abcdef read caf\xc3\xa9\n"));
  std::string many;
  for (std::size_t i = 0; i <= kMaxGrants; ++i) many += "#\n";
  EXPECT_TRUE(refused(many));
  auto grants = parse_http_grants("0123456789abcdef publish a.b\n# c\n0123456789abcdeg read *");
  ASSERT_EQ(grants.size(), 2u);
  EXPECT_EQ(grants[0].prefix, "a.b");
  EXPECT_EQ(grants[0].role, HttpGrant::Role::Publish);
  EXPECT_EQ(grants[1].prefix, "");
  EXPECT_EQ(grants[1].role, HttpGrant::Role::Read);

  TempDir dir;
  std::ofstream(dir.file("big")) << std::string(kMaxGrantFileBytes + 1, '#');
  EXPECT_EQ(error_code_of([&] { load_http_grants(dir.file("big")); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { load_http_grants(dir.file("absent")); }),
            ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace memwire::sideband
