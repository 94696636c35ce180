// What is NATS's own in NatsChannel, against a real nats-server (JetStream on, temporary store):
// its entry format, buckets, credentials, restarts and pieces. No mocks. The cases every channel
// shares are in ../conformance/.

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "memwire/error_codes.hpp"
#include "memwire/metadata.hpp"
#include "memwire/sideband/nats.hpp"
#include "support/error_code_of.hpp"
#include "support/metadata_samples.hpp"
#include "support/nats_connection_events.hpp"
#include "support/nats_server.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using namespace memwire::test_support;

NatsOptions options_for(const NatsServer& server) {
  NatsOptions options;
  options.servers = {server.url()};
  options.reconnect_wait = 50ms;
  return options;
}

// A plain nats.c client, for what a NatsChannel would never do (answer slowly, store garbage).
struct RawClient {
  explicit RawClient(const std::string& url) {
    natsOptions* options = nullptr;
    natsOptions_Create(&options);
    natsOptions_SetURL(options, url.c_str());
    EXPECT_EQ(natsConnection_Connect(&connection, options), NATS_OK);
    natsOptions_Destroy(options);
    EXPECT_EQ(natsConnection_JetStream(&js, connection, nullptr), NATS_OK);
  }
  ~RawClient() {
    if (kv) kvStore_Destroy(kv);
    if (parts) kvStore_Destroy(parts);
    jsCtx_Destroy(js);
    natsConnection_Destroy(connection);
  }
  // A bucket made by hand, as an operator might, before any channel: one copy, `max_age`.
  void create_bucket(const char* bucket, std::chrono::nanoseconds max_age) {
    kvConfig config;
    kvConfig_Init(&config);
    config.Bucket = bucket;
    config.History = 1;
    config.TTL = max_age.count();  // nats.c 3.4: the stream's MaxAge, in nanoseconds
    kvStore* store = nullptr;
    ASSERT_EQ(js_CreateKeyValue(&store, js, &config), NATS_OK);
    kvStore_Destroy(store);
  }
  void put(const std::string& key, const std::string& value) {
    if (!kv) {
      ASSERT_EQ(js_KeyValue(&kv, js, "memwire"), NATS_OK);
    }
    uint64_t revision = 0;
    ASSERT_EQ(kvStore_PutString(&revision, kv, key.c_str(), value.c_str()), NATS_OK);
  }
  // Keys in the bucket that holds pieces of large entries.
  std::size_t part_count() {
    if (!parts && js_KeyValue(&parts, js, "memwire_parts") != NATS_OK) return 0;
    kvKeysList keys;
    auto status = kvStore_Keys(&keys, parts, nullptr);
    if (status != NATS_OK) return 0;
    std::size_t count = static_cast<std::size_t>(keys.Count);
    kvKeysList_Destroy(&keys);
    return count;
  }
  natsConnection* connection = nullptr;
  jsCtx* js = nullptr;
  kvStore* kv = nullptr;
  kvStore* parts = nullptr;
};

class NatsChannelTest : public ::testing::Test {
 protected:
  NatsServer server_;
};

// What the channel says of its connection (the cases every channel shares are in
// ../conformance/).
TEST_F(NatsChannelTest, TellsItsServerAndMessageLimit) {
  NatsChannel channel(options_for(server_));
  EXPECT_EQ(channel.max_payload(), std::size_t{1} << 20);
  EXPECT_EQ(channel.connected_url(), server_.url());
}

TEST_F(NatsChannelTest, SlowOwnerIsTimeout) {
  RawClient slow_owner(server_.url());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  natsSubscription* subscription = nullptr;
  auto handler = [](natsConnection*, natsSubscription*, natsMsg* message, void* closure) {
    static_cast<std::shared_future<void>*>(closure)->wait();  // answers only when released
    natsMsg_Destroy(message);
  };
  ASSERT_EQ(natsConnection_Subscribe(&subscription, slow_owner.connection, "memwire.md.slow.name",
                                     handler, &released),
            NATS_OK);
  ASSERT_EQ(natsConnection_Flush(slow_owner.connection), NATS_OK);

  NatsChannel reader(options_for(server_));
  try {
    reader.fetch("slow.name", 200ms);
    ADD_FAILURE() << "fetch returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Timeout) << error.what();
  }
  release.set_value();
  natsSubscription_Unsubscribe(subscription);
  natsSubscription_Destroy(subscription);
}

TEST_F(NatsChannelTest, MalformedEntryIsInvalidMetadata) {
  NatsChannel reader(options_for(server_));
  RawClient raw(server_.url());
  raw.put("broken.json", "{this is not json");
  raw.put("broken.array", "[1,2,3]");
  raw.put("broken.envelope", R"({"expires_at_ms":0,"metadata":"text"})");
  raw.put("broken.metadata", R"({"expires_at_ms":0,"metadata":{"descriptors":[]}})");
  raw.put("broken.parts", R"({"expires_at_ms":0,"parts":2,"part_key":"../x","size":10})");
  for (const char* name :
       {"broken.json", "broken.array", "broken.envelope", "broken.metadata", "broken.parts"}) {
    try {
      reader.fetch(name, 2s);
      ADD_FAILURE() << name << ": fetch returned";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata) << name << ": " << error.what();
    }
    EXPECT_EQ(error_code_of([&] { reader.wait_for(name, 2s); }), ErrorCode::InvalidMetadata)
        << name;
  }
  // Bare metadata (put by hand or another tool) is accepted, without expiry.
  const auto metadata = sample_metadata(11);
  raw.put("bare.metadata", metadata.to_json());
  EXPECT_EQ(reader.fetch("bare.metadata", 2s), metadata);
}

TEST_F(NatsChannelTest, BucketPrefixAndMaxAgeComeFromOptions) {
  auto tenant_options = options_for(server_);
  tenant_options.subject_prefix = "tenant-b.memwire";
  tenant_options.kv_bucket = "tenant-b";
  tenant_options.kv_max_age = 90s;
  NatsChannel tenant(tenant_options);
  NatsChannel plain(options_for(server_));
  tenant.publish("shared.name", sample_metadata(60), 0ms);
  {
    NatsChannel orphan(tenant_options);
    orphan.publish("tenant.orphan", sample_metadata(61), 0ms);
  }
  // Separate subjects and buckets: the other channel sees none of it.
  EXPECT_EQ(error_code_of([&] { plain.fetch("shared.name", 1s); }), ErrorCode::NotFound);
  EXPECT_EQ(plain.list(), std::vector<std::string>{});
  EXPECT_EQ(tenant.fetch("shared.name", 1s), sample_metadata(60));
  EXPECT_EQ(tenant.fetch("tenant.orphan", 1s), sample_metadata(61));

  // kv_max_age becomes the bucket's MaxAge: the bound on every entry's life in the store.
  RawClient raw(server_.url());
  kvStore* store = nullptr;
  ASSERT_EQ(js_KeyValue(&store, raw.js, "tenant-b"), NATS_OK);
  kvStatus* status = nullptr;
  ASSERT_EQ(kvStore_Status(&status, store), NATS_OK);
  EXPECT_EQ(kvStatus_TTL(status), 90'000'000'000);  // nanoseconds
  kvStatus_Destroy(status);
  kvStore_Destroy(store);

  tenant_options.subject_prefix = "bad prefix";
  EXPECT_EQ(error_code_of([&] { NatsChannel channel(tenant_options); }),
            ErrorCode::InvalidArgument);
  // An inbox prefix is a subject without wildcards: one with '>' would take others' replies.
  tenant_options.subject_prefix = "tenant-b.memwire";
  for (const char* bad : {"_INBOX.>", "_INBOX.*", "in box", "trailing."}) {
    tenant_options.inbox_prefix = bad;
    EXPECT_EQ(error_code_of([&] { NatsChannel channel(tenant_options); }),
              ErrorCode::InvalidArgument)
        << bad;
  }
  tenant_options.inbox_prefix = "_INBOX_tenant-b";
  NatsChannel with_own_inbox(tenant_options);
  with_own_inbox.publish("x", sample_metadata(3), 0ms);
  EXPECT_EQ(with_own_inbox.fetch("x", 2s), sample_metadata(3));
}

// Issue 23, finding 8: a bucket created beforehand with a 1 s max age made every name vanish
// after 1 s while its publisher still served it. Such a bucket is now refused, unless the
// channel says it accepts that max age.
TEST_F(NatsChannelTest, ABucketThatDropsNamesSoonerIsRefused) {
  RawClient raw(server_.url());
  raw.create_bucket("memwire", 1s);
  std::string message;
  try {
    NatsChannel channel(options_for(server_));
    ADD_FAILURE() << "a bucket with a 1 s max age was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    message = error.what();
  }
  EXPECT_NE(message.find("1000 ms"), std::string::npos) << message;
  auto accepting = options_for(server_);
  accepting.kv_max_age = 1s;
  NatsChannel channel(accepting);
  channel.publish("short.lived", sample_metadata(5), 0ms);
  EXPECT_EQ(channel.fetch("short.lived", 1s), sample_metadata(5));
}

// Issue 23, finding 8: the parts bucket was never checked. One made beforehand with a 1 s max
// age dropped the pieces of large entries after 1 s, their names unreadable while published.
// It is now refused like the registry bucket, when a large entry first needs it.
TEST(NatsPartsBucket, APartsBucketThatDropsPiecesSoonerIsRefused) {
  NatsServerOptions small;
  small.max_payload = 8192;  // a 200-descriptor metadata (about 11 KB) goes in pieces
  NatsServer server(small);
  RawClient raw(server.url());
  raw.create_bucket("memwire_parts", 1s);
  NatsChannel channel(options_for(server));
  try {
    channel.publish("big.entry", sample_metadata(7, OperationKind::Read, 200), 0ms);
    ADD_FAILURE() << "pieces went into a bucket that drops them after 1 s";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument) << error.what();
    EXPECT_NE(std::string(error.what()).find("'memwire_parts' drops every entry after 1000 ms"),
              std::string::npos)
        << error.what();
  }
}

TEST(NatsChannelAuth, WrongTokenIsAccessDenied) {
  NatsServerOptions server_options;
  server_options.token = "s3cret";
  NatsServer server(server_options);
  auto options = options_for(server);
  options.token = "wrong";
  try {
    NatsChannel channel(options);
    ADD_FAILURE() << "connected with a wrong token";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::AccessDenied);
    EXPECT_NE(std::string(error.what()).find("Authorization Violation"), std::string::npos)
        << error.what();
  }
  options.token.clear();
  EXPECT_EQ(error_code_of([&] { NatsChannel channel(options); }), ErrorCode::AccessDenied);
  options.token = "s3cret";
  NatsChannel channel(options);
  channel.publish("with.token", sample_metadata(13), 0ms);
  EXPECT_EQ(channel.fetch("with.token", 2s), sample_metadata(13));
}

TEST(NatsChannelAuth, WrongPasswordIsAccessDenied) {
  NatsServerOptions server_options;
  server_options.user = "worker";
  server_options.password = "pw";
  NatsServer server(server_options);
  auto options = options_for(server);
  options.user = "worker";
  options.password = "nope";
  EXPECT_EQ(error_code_of([&] { NatsChannel channel(options); }), ErrorCode::AccessDenied);
  options.password = "pw";
  EXPECT_NO_THROW(NatsChannel channel(options));
}

TEST(NatsChannelConnect, NoServerIsTransport) {
  std::string url;
  {
    NatsServer server;
    url = server.url();
  }
  NatsOptions options;
  options.servers = {url};
  options.connect_timeout = 500ms;
  EXPECT_EQ(error_code_of([&] { NatsChannel channel(options); }), ErrorCode::Transport);
}

TEST(NatsChannelConnect, NoJetStreamIsTransport) {
  NatsServerOptions server_options;
  server_options.jetstream = false;
  NatsServer server(server_options);
  auto options = options_for(server);
  options.request_timeout = 1s;
  try {
    NatsChannel channel(options);
    ADD_FAILURE() << "connected without JetStream";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Transport);
    EXPECT_NE(std::string(error.what()).find("JetStream"), std::string::npos) << error.what();
  }
}

TEST_F(NatsChannelTest, ServerRestartKeepsPublishedNames) {
  NatsConnectionEvents owner_events;
  NatsConnectionEvents reader_events;
  auto owner_options = options_for(server_);
  owner_events.hook(owner_options);
  auto reader_options = options_for(server_);
  reader_events.hook(reader_options);
  NatsChannel owner(owner_options);
  NatsChannel reader(reader_options);
  {
    NatsChannel orphan(options_for(server_));
    orphan.publish("restart.orphan", sample_metadata(14), 0ms);
  }
  owner.publish("restart.live", sample_metadata(15), 0ms);

  server_.restart();  // same port, same store folder
  ASSERT_TRUE(owner_events.wait_reconnected(1, 15s)) << server_.log();
  ASSERT_TRUE(reader_events.wait_reconnected(1, 15s)) << server_.log();
  EXPECT_GE(owner_events.disconnected, 1);
  // The owner's resubscription must have reached the server before we ask.
  owner.flush(2s);

  EXPECT_EQ(reader.fetch("restart.live", 2s), sample_metadata(15));
  EXPECT_EQ(reader.fetch("restart.orphan", 2s), sample_metadata(14));
  EXPECT_EQ(reader.wait_for("restart.live", 2s), sample_metadata(15));
  const auto names = reader.list();
  EXPECT_EQ(names, (std::vector<std::string>{"restart.live", "restart.orphan"}));
  owner.publish("restart.after", sample_metadata(16), 0ms);
  EXPECT_EQ(reader.fetch("restart.after", 2s), sample_metadata(16));
}

TEST_F(NatsChannelTest, WaitForSurvivesServerRestart) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  auto waiter =
      std::async(std::launch::async, [&] { return reader.wait_for("after.restart", 30s); });
  // Give the watcher time to be in place, so that the restart happens under it.
  std::this_thread::sleep_for(300ms);
  server_.restart();
  owner.publish("after.restart", sample_metadata(18), 0ms);  // buffered until reconnected
  EXPECT_EQ(waiter.get(), sample_metadata(18));
}

TEST_F(NatsChannelTest, CrashedServerComesBackWithItsStore) {
  NatsConnectionEvents events;
  auto options = options_for(server_);
  events.hook(options);
  NatsChannel reader(options);
  {
    NatsChannel orphan(options_for(server_));
    orphan.publish("crash.orphan", sample_metadata(17), 0ms);
  }
  server_.stop(/*graceful=*/false);
  server_.start();
  ASSERT_TRUE(events.wait_reconnected(1, 15s)) << server_.log();
  EXPECT_EQ(reader.fetch("crash.orphan", 2s), sample_metadata(17));
}

TEST_F(NatsChannelTest, MetadataLargerThanOneMessage) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  RawClient raw(server_.url());
  // 25000 descriptors: about 1.3 MB of JSON, more than NATS's 1 MiB message limit.
  const auto large = sample_metadata(20, OperationKind::Read, 25000);
  const std::size_t json_size = large.to_json().size();
  ASSERT_GT(json_size, owner.max_payload());
  owner.publish("large.blocks", large, 0ms);
  EXPECT_EQ(reader.fetch("large.blocks", 5s), large);
  EXPECT_EQ(reader.wait_for("large.blocks", 5s), large);
  // Pieces of (max payload - 4 KiB headroom).
  const std::size_t piece = owner.max_payload() - 4096;
  EXPECT_EQ(raw.part_count(), (json_size + piece - 1) / piece);

  // Replaced by a small one: the old pieces go.
  owner.publish("large.blocks", sample_metadata(21), 0ms);
  EXPECT_EQ(reader.fetch("large.blocks", 5s), sample_metadata(21));
  EXPECT_EQ(raw.part_count(), 0u);

  // From the registry alone, once its publisher is gone.
  {
    NatsChannel orphan(options_for(server_));
    orphan.publish("large.orphan", large, 0ms);
  }
  EXPECT_EQ(reader.fetch("large.orphan", 5s), large);
  reader.withdraw("large.orphan");
  EXPECT_EQ(error_code_of([&] { reader.fetch("large.orphan", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(raw.part_count(), 0u);
}

// A writable metadata larger than one message travels in pieces, removed after the reply.
TEST_F(NatsChannelTest, LargeRequestTravelsInPiecesRemovedAfterTheReply) {
  NatsChannel owner(options_for(server_));
  NatsChannel requester(options_for(server_));
  std::mutex mutex;
  std::vector<std::pair<std::string, RdmaMetadata>> seen;
  auto subscription =
      owner.serve("models.embed", [&](const std::string& name, const RdmaMetadata& writable) {
        std::lock_guard lock(mutex);
        seen.emplace_back(name, writable);  // stands for "the data was written into it"
      });
  const auto large = sample_metadata(31, OperationKind::Write, 25000);
  ASSERT_GT(large.to_json().size(), owner.max_payload());
  requester.request("models.embed.big", large, 10s);
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].first, "models.embed.big");
    EXPECT_EQ(seen[0].second, large);
  }
  RawClient raw(server_.url());
  EXPECT_EQ(raw.part_count(), 0u);  // the request's pieces are removed after the reply
}

// A requester that sends garbage (no NatsChannel) gets a clear error back, and the owner keeps
// serving.
TEST_F(NatsChannelTest, GarbageRequestIsAnsweredAndTheOwnerKeepsServing) {
  NatsChannel owner(options_for(server_));
  NatsChannel requester(options_for(server_));
  auto subscription = owner.serve("", [](const std::string&, const RdmaMetadata&) {});
  RawClient raw(server_.url());
  natsMsg* reply = nullptr;
  ASSERT_EQ(natsConnection_RequestString(&reply, raw.connection, "memwire.get.some.name", "garbage",
                                         2000),
            NATS_OK);
  EXPECT_NE(std::string(natsMsg_GetData(reply)).find("\"code\":\"invalid_metadata\""),
            std::string::npos)
      << natsMsg_GetData(reply);
  natsMsg_Destroy(reply);
  EXPECT_NO_THROW(requester.request("ok.name", sample_metadata(40, OperationKind::Write), 2s));
}

// A well-formed request whose metadata is none is refused in the words every channel uses for
// it (channel_rules::metadata_under), as an HTTP owner refuses it.
TEST_F(NatsChannelTest, RequestWithoutMetadataIsRefusedInTheSharedWords) {
  NatsChannel owner(options_for(server_));
  auto subscription = owner.serve("", [](const std::string&, const RdmaMetadata&) {});
  RawClient raw(server_.url());
  natsMsg* reply = nullptr;
  ASSERT_EQ(natsConnection_RequestString(&reply, raw.connection, "memwire.get.some.name",
                                         R"({"expires_at_ms":0,"metadata":{"version":1}})", 2000),
            NATS_OK);
  const std::string answer = natsMsg_GetData(reply);
  natsMsg_Destroy(reply);
  EXPECT_NE(answer.find("\"code\":\"invalid_metadata\""), std::string::npos) << answer;
  EXPECT_NE(answer.find("metadata under 'some.name': "), std::string::npos) << answer;
}

}  // namespace
}  // namespace memwire::sideband
