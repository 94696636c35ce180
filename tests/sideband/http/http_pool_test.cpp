// What is HTTP's own in pools' metadata by name, against a real memwire-registry process: forged
// bodies refused, bearer-token grants, and the state file across a restart. The cases every
// channel shares are in ../conformance/.

#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/sideband/http.hpp"
#include "sideband/pool_cases.hpp"
#include "support/error_code_of.hpp"
#include "support/http_channel_options.hpp"
#include "support/metadata_samples.hpp"
#include "support/registry_process.hpp"
#include "support/temp_dir.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using pool_cases::PoolSide;
using pool_cases::read_three_blocks;
using namespace memwire::test_support;

// A raw request, as a forger would send it: no HttpChannel in between.
httplib::Result raw_put(const std::string& url, const std::string& path, const std::string& body,
                        const std::string& token = {}) {
  httplib::Client client(url);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  return client.Put(path, headers, body, "application/json");
}

class HttpPools : public ::testing::Test {
 protected:
  RegistryProcess registry_;
  HttpChannel owner_{http_channel_options(registry_.url())};
  HttpChannel reader_{http_channel_options(registry_.url())};
};

TEST_F(HttpPools, ForgedBodiesAreRefusedAndNothingIsStored) {
  PoolSide owner;
  auto valid = owner.pool->metadata().to_json();
  // Not JSON; an operation's metadata; a pool document with a field too many; over the limit.
  std::string tampered = valid;
  tampered.insert(1, R"("admin":true,)");
  std::string oversized(PoolMetadata::kMaxJsonBytes + 1, ' ');
  oversized.replace(0, valid.size(), valid);
  for (const auto& [body, status] :
       std::vector<std::pair<std::string, int>>{{"garbage{", 400},
                                                {sample_metadata(1).to_json(), 400},
                                                {tampered, 400},
                                                {oversized, 413}}) {
    auto result = raw_put(registry_.url(), "/v1/pools/forged", body);
    ASSERT_TRUE(result) << "no answer";
    EXPECT_EQ(result->status, status) << result->body;
    EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("forged", 2s); }), ErrorCode::NotFound);
  }
  // A pool's document is no operation's metadata either.
  auto result = raw_put(registry_.url(), "/v1/metadata/forged", valid);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400) << result->body;
  // The valid one is taken.
  result = raw_put(registry_.url(), "/v1/pools/forged", valid);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 204) << result->body;
  EXPECT_EQ(reader_.fetch_pool("forged", 2s), owner.pool->metadata());
}

// --grants: a publish token may publish and withdraw pools under its prefix only; a read token
// may fetch them and nothing more. The owner's pool stays as the owner left it.
TEST(HttpPoolGrants, TokensPublishOnlyWhatTheirGrantAllows) {
  constexpr const char* kOwner = "owner-a-0123456789abcdef";
  constexpr const char* kReader = "reader-0123456789abcdef";
  TempDir dir;
  std::ofstream(dir.file("grants")) << kOwner << " publish a\n" << kReader << " read *\n";
  RegistryProcess registry({"--grants", dir.file("grants")});
  HttpChannel owning(http_channel_options(registry.url(), kOwner));
  HttpChannel reading(http_channel_options(registry.url(), kReader));
  HttpChannel nobody(http_channel_options(registry.url(), "not-a-token-0123456789"));

  PoolSide owner, other;
  owning.publish_pool("a.kv", owner.pool->metadata(), 0ms);
  EXPECT_EQ(reading.fetch_pool("a.kv", 2s), owner.pool->metadata());

  EXPECT_EQ(error_code_of([&] { owning.publish_pool("b.kv", other.pool->metadata(), 0ms); }),
            ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { reading.publish_pool("a.kv", other.pool->metadata(), 0ms); }),
            ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { reading.withdraw_pool("a.kv"); }), ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { nobody.fetch_pool("a.kv", 2s); }), ErrorCode::AccessDenied);
  auto forged =
      raw_put(registry.url(), "/v1/pools/a.kv", other.pool->metadata().to_json(), kReader);
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403);

  EXPECT_EQ(reading.fetch_pool("a.kv", 2s), owner.pool->metadata());
  EXPECT_EQ(error_code_of([&] { reading.fetch_pool("b.kv", 2s); }), ErrorCode::NotFound);
}

// --state: pools come back after a restart, still apart from operations of the same name.
TEST(HttpPoolState, PoolsSurviveARestart) {
  TempDir dir;
  PoolSide owner(500), reader;
  {
    RegistryProcess registry({"--state", dir.file("state")});
    HttpChannel channel(http_channel_options(registry.url()));
    channel.publish_pool("kept", owner.pool->metadata(), 0ms);
    channel.publish_pool("dropped", owner.pool->metadata(), 0ms);
    channel.withdraw_pool("dropped");
    channel.publish("kept", sample_metadata(9), 0ms);
  }
  RegistryProcess registry({"--state", dir.file("state")});
  HttpChannel channel(http_channel_options(registry.url()));
  auto fetched = channel.fetch_pool("kept", 2s);
  EXPECT_EQ(fetched, owner.pool->metadata());
  EXPECT_EQ(channel.fetch("kept", 2s), sample_metadata(9));
  EXPECT_EQ(error_code_of([&] { channel.fetch_pool("dropped", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(channel.list(), std::vector<std::string>{"kept"});
  ASSERT_EQ(read_three_blocks(reader, fetched), OperationStatus::Complete);
  EXPECT_TRUE(reader.holds(1, 502));
}

}  // namespace
}  // namespace memwire::sideband
