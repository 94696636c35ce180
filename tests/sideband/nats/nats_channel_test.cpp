// NatsChannel against a real nats-server (JetStream on, temporary store). No mocks.

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
#include "support/nats_server.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using memwire::test_support::error_code_of;
using test_support::NatsServer;
using test_support::NatsServerOptions;

using test_support::hex32;
using test_support::sample_metadata;

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

TEST_F(NatsChannelTest, PublishFetchRoundTrip) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  const auto metadata = sample_metadata(1);
  owner.publish("models.embed.req-1", metadata, 0ms);
  EXPECT_EQ(reader.fetch("models.embed.req-1", 2s), metadata);
  EXPECT_EQ(owner.fetch("models.embed.req-1", 2s), metadata);

  // Publishing again replaces the value, for the responder and the registry alike.
  const auto replacement = sample_metadata(2);
  owner.publish("models.embed.req-1", replacement, 0ms);
  EXPECT_EQ(reader.fetch("models.embed.req-1", 2s), replacement);
  EXPECT_EQ(reader.list(), std::vector<std::string>{"models.embed.req-1"});
  EXPECT_EQ(reader.max_payload(), std::size_t{1} << 20);
  EXPECT_EQ(reader.connected_url(), server_.url());
}

TEST_F(NatsChannelTest, RegistryAnswersWhenThePublisherIsGone) {
  const auto metadata = sample_metadata(3);
  {
    NatsChannel owner(options_for(server_));
    owner.publish("durable.one", metadata, 0ms);
  }
  NatsChannel reader(options_for(server_));
  EXPECT_EQ(reader.fetch("durable.one", 2s), metadata);
  EXPECT_EQ(reader.wait_for("durable.one", 2s), metadata);
}

TEST_F(NatsChannelTest, UnknownNameIsNotFoundAndQuick) {
  NatsChannel reader(options_for(server_));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { reader.fetch("nobody.has.this", 5s); }), ErrorCode::NotFound);
  // No responders is an answer, not a wait for the timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
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

TEST_F(NatsChannelTest, WithdrawnNameIsNotFound) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  owner.publish("gone.soon", sample_metadata(4), 0ms);
  owner.publish("stays", sample_metadata(5), 0ms);
  ASSERT_NO_THROW(reader.fetch("gone.soon", 2s));
  owner.withdraw("gone.soon");
  EXPECT_EQ(error_code_of([&] { reader.fetch("gone.soon", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(reader.list(), std::vector<std::string>{"stays"});
  EXPECT_NO_THROW(owner.withdraw("gone.soon"));  // idempotent
  EXPECT_NO_THROW(owner.withdraw("never.published"));
  // Withdrawn by another process: the registry entry goes, and with it the durable copy.
  reader.withdraw("stays");
  EXPECT_EQ(reader.list(), std::vector<std::string>{});
}

TEST_F(NatsChannelTest, TtlExpiry) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  const auto published_at = std::chrono::steady_clock::now();
  owner.publish("short.lived", sample_metadata(6), 300ms);
  {
    NatsChannel orphan(options_for(server_));  // publisher gone: only the registry knows it
    orphan.publish("short.orphan", sample_metadata(7), 300ms);
  }
  owner.publish("long.lived", sample_metadata(8), 60s);
  EXPECT_NO_THROW(reader.fetch("short.lived", 2s));
  EXPECT_NO_THROW(reader.fetch("short.orphan", 2s));

  // Time itself is what is tested here: one wait until past the TTL.
  std::this_thread::sleep_until(published_at + 400ms);
  EXPECT_EQ(error_code_of([&] { reader.fetch("short.lived", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader.fetch("short.lived", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader.fetch("short.orphan", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader.wait_for("short.orphan", 100ms); }), ErrorCode::Timeout);
  EXPECT_EQ(reader.fetch("long.lived", 2s), sample_metadata(8));
  EXPECT_EQ(reader.list(), std::vector<std::string>{"long.lived"});

  // Published again after expiring: answers again.
  owner.publish("short.lived", sample_metadata(9), 0ms);
  EXPECT_EQ(reader.fetch("short.lived", 2s), sample_metadata(9));
}

TEST_F(NatsChannelTest, WaitForWakesWhenPublishedLater) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  const auto metadata = sample_metadata(10);
  auto waiter = std::async(std::launch::async, [&] { return reader.wait_for("later.name", 10s); });
  std::thread publisher([&] {
    // "Later": after the waiter has had time to start watching.
    std::this_thread::sleep_for(200ms);
    owner.publish("later.name", metadata, 0ms);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(waiter.get(), metadata);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  publisher.join();

  EXPECT_EQ(error_code_of([&] { reader.wait_for("never.comes", 150ms); }), ErrorCode::Timeout);
}

// A caller that gives up (a cancelled Python task) stops its wait at once, not at the timeout.
TEST_F(NatsChannelTest, AbandonedWaitEndsAtOnce) {
  NatsChannel reader(options_for(server_));
  std::stop_source abandon;
  auto waiter = std::async(std::launch::async, [&] {
    return error_code_of([&] { reader.wait_for("never.there", 30s, abandon.get_token()); });
  });
  std::this_thread::sleep_for(200ms);
  const auto start = std::chrono::steady_clock::now();
  abandon.request_stop();
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST_F(NatsChannelTest, ManyWaitersWakeOnOnePublish) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  constexpr int kWaiters = 20;
  std::vector<std::future<RdmaMetadata>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(
        std::async(std::launch::async, [&] { return reader.wait_for("crowd.name", 10s); }));
  }
  std::this_thread::sleep_for(100ms);  // most are waiting by now; the others find it stored
  owner.publish("crowd.name", sample_metadata(19), 0ms);
  for (auto& waiter : waiters) EXPECT_EQ(waiter.get(), sample_metadata(19));
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

TEST_F(NatsChannelTest, InvalidNamesAreRejected) {
  NatsChannel channel(options_for(server_));
  for (const char* name : {"", "a..b", ".a", "a.", "with space", "star.*", "gt.>", "ü"}) {
    EXPECT_EQ(error_code_of([&] { channel.publish(name, sample_metadata(12), 0ms); }),
              ErrorCode::InvalidArgument)
        << name;
    EXPECT_EQ(error_code_of([&] { channel.fetch(name, 1s); }), ErrorCode::InvalidArgument) << name;
  }
  EXPECT_EQ(error_code_of([&] { channel.publish("ok", sample_metadata(12), -1ms); }),
            ErrorCode::InvalidArgument);
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

// Counts connection events so a test can wait for "reconnected" without polling.
struct Reconnects {
  std::mutex mutex;
  std::condition_variable changed;
  int disconnected = 0;
  int reconnected = 0;

  void hook(NatsOptions& options) {
    options.on_disconnected = [this] {
      std::lock_guard lock(mutex);
      ++disconnected;
      changed.notify_all();
    };
    options.on_reconnected = [this] {
      std::lock_guard lock(mutex);
      ++reconnected;
      changed.notify_all();
    };
  }
  bool wait_reconnected(int count, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return reconnected >= count; });
  }
};

TEST_F(NatsChannelTest, ServerRestartKeepsPublishedNames) {
  Reconnects owner_events;
  Reconnects reader_events;
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
  Reconnects events;
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

TEST_F(NatsChannelTest, HundredNamesConcurrently) {
  NatsChannel owner(options_for(server_));
  NatsChannel reader(options_for(server_));
  constexpr int kNames = 100;
  constexpr int kThreads = 10;
  auto name_of = [](int i) { return "bulk.item-" + std::to_string(i); };

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kNames; i += kThreads) {
        try {
          owner.publish(name_of(i), sample_metadata(1000 + i), 0ms);
        } catch (const std::exception& error) {
          ADD_FAILURE() << error.what();
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  threads.clear();
  ASSERT_EQ(failures.load(), 0);

  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kNames; i += kThreads) {
        try {
          if (reader.fetch(name_of(i), 5s) != sample_metadata(1000 + i)) ++failures;
        } catch (const std::exception& error) {
          ADD_FAILURE() << error.what();
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(reader.list().size(), static_cast<std::size_t>(kNames));
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

TEST_F(NatsChannelTest, RequestReplyWritesIntoTheRequestersMetadata) {
  NatsChannel owner(options_for(server_));
  NatsChannel requester(options_for(server_));
  std::mutex mutex;
  std::vector<std::pair<std::string, RdmaMetadata>> seen;
  auto subscription =
      owner.serve("models.embed", [&](const std::string& name, const RdmaMetadata& writable) {
        std::lock_guard lock(mutex);
        seen.emplace_back(name, writable);  // stands for "the data was written into it"
      });

  const auto writable = sample_metadata(30, OperationKind::Write);
  requester.request("models.embed.req-7", writable, 2s);
  requester.request("models.embed", writable, 2s);  // the prefix itself is a served name
  const auto large = sample_metadata(31, OperationKind::Write, 25000);
  requester.request("models.embed.big", large, 10s);
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].first, "models.embed.req-7");
    EXPECT_EQ(seen[0].second, writable);
    EXPECT_EQ(seen[1].first, "models.embed");
    EXPECT_EQ(seen[2].first, "models.embed.big");
    EXPECT_EQ(seen[2].second, large);
  }
  RawClient raw(server_.url());
  EXPECT_EQ(raw.part_count(), 0u);  // the request's pieces are removed after the reply

  // Not under the prefix: nobody serves it.
  EXPECT_EQ(error_code_of([&] { requester.request("models.embedding", writable, 1s); }),
            ErrorCode::NotFound);
  subscription.reset();
  EXPECT_EQ(error_code_of([&] { requester.request("models.embed.req-8", writable, 1s); }),
            ErrorCode::NotFound);
}

// Every code an owner throws reaches the requester as that code, its message once (no code text
// folded into it on the way).
TEST_F(NatsChannelTest, EveryOwnerErrorCodeCrossesTheWire) {
  NatsChannel owner(options_for(server_));
  NatsChannel requester(options_for(server_));
  auto subscription = owner.serve("code", [](const std::string& name, const RdmaMetadata&) {
    const auto code = kAllErrorCodes.at(std::stoul(name.substr(name.rfind('.') + 1)));
    throw Error(code, "thrown as " + std::string(error_code_name(code)));
  });
  for (std::size_t i = 0; i < kAllErrorCodes.size(); ++i) {
    const auto name = "code." + std::to_string(i);
    try {
      requester.request(name, sample_metadata(40, OperationKind::Write), 2s);
      ADD_FAILURE() << name << ": request returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kAllErrorCodes[i]) << e.what();
      EXPECT_EQ(e.message(), "the owner of '" + name + "' failed: thrown as " +
                                 std::string(error_code_name(kAllErrorCodes[i])));
    }
  }
}

TEST_F(NatsChannelTest, RequestReplyErrors) {
  NatsChannel owner(options_for(server_));
  NatsChannel requester(options_for(server_));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto subscription = owner.serve("", [&](const std::string& name, const RdmaMetadata&) {
    if (name == "missing.tensor") throw Error(ErrorCode::NotFound, "no tensor called " + name);
    if (name == "wrong.size") throw Error(ErrorCode::SizeMismatch, "4096 != 8192");
    if (name == "plain.failure") throw std::runtime_error("disk on fire");
    if (name == "slow.owner") released.wait();
  });
  const auto writable = sample_metadata(40, OperationKind::Write);

  try {
    requester.request("missing.tensor", writable, 2s);
    ADD_FAILURE() << "request returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(error.what()).find("no tensor called missing.tensor"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(error_code_of([&] { requester.request("wrong.size", writable, 2s); }),
            ErrorCode::SizeMismatch);
  EXPECT_EQ(error_code_of([&] { requester.request("plain.failure", writable, 2s); }),
            ErrorCode::Transport);
  EXPECT_EQ(error_code_of([&] { requester.request("slow.owner", writable, 200ms); }),
            ErrorCode::Timeout);
  // A stop on the request's token ends the wait long before its timeout.
  std::stop_source abandon;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    abandon.request_stop();
  });
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(
      error_code_of([&] { requester.request("slow.owner", writable, 20s, abandon.get_token()); }),
      ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);  // not the 20 s timeout
  stopper.join();
  // Already abandoned: nothing to wait for.
  EXPECT_EQ(
      error_code_of([&] { requester.request("slow.owner", writable, 20s, abandon.get_token()); }),
      ErrorCode::Cancelled);
  release.set_value();
  // Readable metadata cannot be written into.
  EXPECT_EQ(error_code_of([&] { requester.request("any.name", sample_metadata(41), 2s); }),
            ErrorCode::Pairing);

  // A requester that sends garbage gets a clear error back, and the owner keeps serving.
  RawClient raw(server_.url());
  natsMsg* reply = nullptr;
  ASSERT_EQ(natsConnection_RequestString(&reply, raw.connection, "memwire.get.some.name", "garbage",
                                         2000),
            NATS_OK);
  EXPECT_NE(std::string(natsMsg_GetData(reply)).find("\"code\":\"invalid_metadata\""),
            std::string::npos)
      << natsMsg_GetData(reply);
  natsMsg_Destroy(reply);
  EXPECT_NO_THROW(requester.request("ok.name", writable, 2s));
}

TEST_F(NatsChannelTest, ServeSubscriptionMayOutliveItsChannel) {
  std::unique_ptr<Subscription> subscription;
  std::atomic<int> calls{0};
  {
    NatsChannel owner(options_for(server_));
    subscription = owner.serve("kept", [&](const std::string&, const RdmaMetadata&) { ++calls; });
  }
  NatsChannel requester(options_for(server_));
  requester.request("kept.alive", sample_metadata(50, OperationKind::Write), 2s);
  EXPECT_EQ(calls.load(), 1);
  subscription.reset();
  EXPECT_EQ(error_code_of([&] {
              requester.request("kept.alive", sample_metadata(50, OperationKind::Write), 1s);
            }),
            ErrorCode::NotFound);
}

}  // namespace
}  // namespace memwire::sideband
