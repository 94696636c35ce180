// What is NATS's own in pools' metadata by name, against a real nats-server (JetStream KV):
// large metadata in pieces, and the per-role users of deploy/nats/roles.conf publishing pools
// under their own prefix only. The cases every channel shares are in ../conformance/.

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"
#include "sideband/pool_cases.hpp"
#include "support/error_code_of.hpp"
#include "support/nats_server.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using pool_cases::PoolSide;
using namespace memwire::test_support;

NatsOptions options_for(const NatsServer& server) {
  NatsOptions options;
  options.servers = {server.url()};
  options.kv_replicas = 1;
  options.reconnect_wait = 50ms;
  return options;
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
  auto fields = real.fields();
  fields.name = "big";
  fields.regions = regions;
  PoolMetadata large(std::move(fields));
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
