// Pools' metadata by name over NATS, against a real nats-server (JetStream KV): published by the
// owner, fetched by a reader and used to move bytes between two connectors; kept apart from
// operations' names; refused as InvalidMetadata when the stored document is not a pool's; and
// the per-role users of deploy/nats/roles.conf publish pools under their own prefix only.

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <future>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"
#include "sideband/pool_cases.hpp"
#include "support/error_code_of.hpp"
#include "support/metadata_samples.hpp"
#include "support/nats_server.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using pool_cases::PoolSide;
using pool_cases::read_three_blocks;
using test_support::error_code_of;
using test_support::NatsServer;
using test_support::NatsServerOptions;
using test_support::sample_metadata;

NatsOptions options_for(const NatsServer& server) {
  NatsOptions options;
  options.servers = {server.url()};
  options.kv_replicas = 1;
  options.reconnect_wait = 50ms;
  return options;
}

// Puts `value` under `key` of the registry bucket with nats.c alone, as a tool or a forger
// would: no memwire code in between.
void raw_put(const NatsServer& server, const std::string& key, const std::string& value) {
  natsConnection* connection = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&connection, server.url().c_str()), NATS_OK);
  jsCtx* js = nullptr;
  kvStore* kv = nullptr;
  EXPECT_EQ(natsConnection_JetStream(&js, connection, nullptr), NATS_OK);
  EXPECT_EQ(js_KeyValue(&kv, js, "memwire"), NATS_OK);
  uint64_t revision = 0;
  EXPECT_EQ(kvStore_PutString(&revision, kv, key.c_str(), value.c_str()), NATS_OK);
  kvStore_Destroy(kv);
  jsCtx_Destroy(js);
  natsConnection_Destroy(connection);
}

class NatsPools : public ::testing::Test {
 protected:
  NatsServer server_;
  NatsChannel owner_{options_for(server_)};
  NatsChannel reader_{options_for(server_)};
};

TEST_F(NatsPools, PublishedPoolIsFetchedByNameAndMovesBytes) {
  PoolSide owner(2000), reader;
  owner_.publish_pool("kv.worker-0", owner.pool->metadata(), 0ms);
  auto fetched = reader_.fetch_pool("kv.worker-0", 2s);
  EXPECT_EQ(fetched, owner.pool->metadata());
  ASSERT_EQ(read_three_blocks(reader, fetched), OperationStatus::Complete);
  EXPECT_TRUE(reader.holds(0, 2001));
  EXPECT_TRUE(reader.holds(1, 2002));
  EXPECT_TRUE(reader.holds(7, 2005));

  owner_.withdraw_pool("kv.worker-0");
  EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("kv.worker-0", 2s); }), ErrorCode::NotFound);
  EXPECT_NO_THROW(owner_.withdraw_pool("kv.worker-0"));
}

TEST_F(NatsPools, UnknownOrExpiredPoolIsNotFound) {
  EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("nobody.home", 2s); }), ErrorCode::NotFound);
  PoolSide owner;
  owner_.publish_pool("brief", owner.pool->metadata(), 100ms);
  EXPECT_EQ(reader_.fetch_pool("brief", 2s), owner.pool->metadata());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("brief", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("a/b", 2s); }), ErrorCode::InvalidArgument);
}

TEST_F(NatsPools, PoolAndOperationOfTheSameNameStayApart) {
  PoolSide owner;
  owner_.publish("shared.name", sample_metadata(3), 0ms);
  owner_.publish_pool("shared.name", owner.pool->metadata(), 0ms);
  EXPECT_EQ(reader_.fetch("shared.name", 2s), sample_metadata(3));
  EXPECT_EQ(reader_.fetch_pool("shared.name", 2s), owner.pool->metadata());
  EXPECT_EQ(reader_.list(), std::vector<std::string>{"shared.name"});  // operations only

  owner_.withdraw_pool("shared.name");
  EXPECT_EQ(reader_.fetch("shared.name", 2s), sample_metadata(3));
  owner_.publish_pool("shared.name", owner.pool->metadata(), 0ms);
  owner_.withdraw("shared.name");
  EXPECT_EQ(reader_.fetch_pool("shared.name", 2s), owner.pool->metadata());
  EXPECT_EQ(error_code_of([&] { reader_.fetch("shared.name", 2s); }), ErrorCode::NotFound);
  EXPECT_TRUE(reader_.list().empty());
}

TEST_F(NatsPools, StoredDocumentThatIsNoPoolIsInvalidMetadata) {
  raw_put(server_, "=pool.garbage", "{\"memwire_pool\": 1}");
  raw_put(server_, "=pool.operation", sample_metadata(1).to_json());
  EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("garbage", 2s); }), ErrorCode::InvalidMetadata);
  EXPECT_EQ(error_code_of([&] { reader_.fetch_pool("operation", 2s); }),
            ErrorCode::InvalidMetadata);
}

TEST_F(NatsPools, WaitForPoolReturnsOncePublished) {
  PoolSide owner;
  auto waiting = std::async(std::launch::async, [&] { return reader_.wait_for_pool("late", 10s); });
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  owner_.publish("late", sample_metadata(4), 0ms);  // an operation of that name: still waiting
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  owner_.publish_pool("late", owner.pool->metadata(), 0ms);
  EXPECT_EQ(waiting.get(), owner.pool->metadata());
  EXPECT_EQ(error_code_of([&] { reader_.wait_for_pool("never", 100ms); }), ErrorCode::Timeout);
}

// Metadata larger than one message goes in pieces (parts bucket) and comes back whole; a
// replacing publish and a withdraw remove the pieces.
TEST(NatsPoolParts, LargePoolMetadataTravelsInPieces) {
  NatsServerOptions small;
  small.max_payload = 4096;
  NatsServer server(small);
  NatsChannel channel(options_for(server));
  PoolSide owner;
  const auto real = owner.pool->metadata();
  // Regions that to_json cannot fold into one group: each a different block count.
  std::vector<RemoteRegion> regions;
  for (std::uint64_t i = 0; i < 200; ++i)
    regions.push_back({real.regions()[0].device, 0x100000 * (i + 1), 4096, 0, i + 1});
  PoolMetadata large("big", real.generation(), regions, real.key(), real.endpoint(), real.token());
  ASSERT_GT(large.to_json().size(), 3 * 4096u);
  channel.publish_pool("big", large, 0ms);
  EXPECT_EQ(channel.fetch_pool("big", 5s), large);
  channel.publish_pool("big", real, 0ms);
  EXPECT_EQ(channel.fetch_pool("big", 5s), real);
  channel.publish_pool("big", large, 0ms);
  channel.withdraw_pool("big");
  EXPECT_EQ(error_code_of([&] { channel.fetch_pool("big", 5s); }), ErrorCode::NotFound);
}

// deploy/nats/roles.conf as it is: an owner publishes pools under its own prefix, another
// owner and a reader cannot overwrite or withdraw them, and a reader fetches them.
TEST(NatsPoolRoles, OwnersPublishOnlyTheirOwnPools) {
  NatsServerOptions roles;
  roles.include_files = {MEMWIRE_DEPLOY_NATS_DIR "/roles.conf"};
  roles.environment = {
      "MEMWIRE_NATS_ADMIN_PASSWORD=admin-pw-0123", "MEMWIRE_NATS_OWNER_EMB_PASSWORD=emb-pw-0123",
      "MEMWIRE_NATS_OWNER_VEC_PASSWORD=vec-pw-0123", "MEMWIRE_NATS_READER_PASSWORD=reader-pw-0123"};
  NatsServer server(roles);
  auto as = [&](const char* user, const char* password) {
    NatsOptions options = options_for(server);
    options.user = user;
    options.password = password;
    options.request_timeout = 1s;  // a JetStream call the server drops fails soon
    return options;
  };
  NatsChannel admin(as("memwire-admin", "admin-pw-0123"));  // creates the buckets
  NatsChannel emb(as("memwire-owner-emb", "emb-pw-0123"));
  NatsChannel vec(as("memwire-owner-vec", "vec-pw-0123"));
  NatsChannel reading(as("memwire-reader", "reader-pw-0123"));

  PoolSide owner, other;
  emb.publish_pool("emb.kv", owner.pool->metadata(), 0ms);
  EXPECT_EQ(reading.fetch_pool("emb.kv", 2s), owner.pool->metadata());
  EXPECT_THROW(vec.publish_pool("emb.kv", other.pool->metadata(), 0ms), Error);
  EXPECT_THROW(reading.publish_pool("emb.kv", other.pool->metadata(), 0ms), Error);
  EXPECT_THROW(vec.withdraw_pool("emb.kv"), Error);
  EXPECT_THROW(reading.withdraw_pool("emb.kv"), Error);
  EXPECT_EQ(reading.fetch_pool("emb.kv", 2s), owner.pool->metadata());
  vec.publish_pool("vec.kv", other.pool->metadata(), 0ms);
  EXPECT_EQ(emb.fetch_pool("vec.kv", 2s), other.pool->metadata());
  emb.withdraw_pool("emb.kv");
  EXPECT_EQ(error_code_of([&] { reading.fetch_pool("emb.kv", 2s); }), ErrorCode::NotFound);
}

}  // namespace
}  // namespace memwire::sideband
