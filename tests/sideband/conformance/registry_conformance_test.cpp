// The registry half of every Channel (names -> metadata), the same cases over HTTP and NATS:
// publish, replace, fetch, list, withdraw, TTLs, waits, bad names and stored garbage.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <latch>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "memwire/error.hpp"
#include "sideband/conformance/channel_world.hpp"
#include "support/error_code_of.hpp"
#include "support/metadata_samples.hpp"

namespace memwire::sideband::conformance {
namespace {

using namespace std::chrono_literals;
using test_support::error_code_of;
using test_support::sample_metadata;

class RegistryConformance : public ChannelConformance {};
MEMWIRE_CHANNEL_CONFORMANCE(RegistryConformance);

TEST_P(RegistryConformance, PublishFetchReplaceAndList) {
  owner_->publish("emb.req-1", sample_metadata(1), 0ms);
  owner_->publish("emb.req-2", sample_metadata(2), 0ms);
  EXPECT_EQ(reader_->fetch("emb.req-1", 2s), sample_metadata(1));
  EXPECT_EQ(owner_->fetch("emb.req-1", 2s), sample_metadata(1));
  EXPECT_EQ(reader_->list(), (std::vector<std::string>{"emb.req-1", "emb.req-2"}));
  // Publishing again replaces the value, for every reader.
  owner_->publish("emb.req-1", sample_metadata(7), 0ms);
  EXPECT_EQ(reader_->fetch("emb.req-1", 2s), sample_metadata(7));
  EXPECT_EQ(reader_->list(), (std::vector<std::string>{"emb.req-1", "emb.req-2"}));
}

TEST_P(RegistryConformance, WithdrawnNameIsNotFoundAndWithdrawIsIdempotent) {
  owner_->publish("gone.soon", sample_metadata(4), 0ms);
  owner_->publish("stays", sample_metadata(5), 0ms);
  ASSERT_NO_THROW(reader_->fetch("gone.soon", 2s));
  owner_->withdraw("gone.soon");
  EXPECT_EQ(error_code_of([&] { reader_->fetch("gone.soon", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(reader_->list(), std::vector<std::string>{"stays"});
  EXPECT_NO_THROW(owner_->withdraw("gone.soon"));
  EXPECT_NO_THROW(owner_->withdraw("never.published"));
  // Withdrawn by another client than its publisher.
  reader_->withdraw("stays");
  EXPECT_EQ(reader_->list(), std::vector<std::string>{});
}

TEST_P(RegistryConformance, NameOutlivesItsPublishersConnection) {
  {
    auto publisher = world_->connect();
    publisher->publish("durable.one", sample_metadata(3), 0ms);
  }
  EXPECT_EQ(reader_->fetch("durable.one", 2s), sample_metadata(3));
  EXPECT_EQ(reader_->wait_for("durable.one", 2s), sample_metadata(3));
}

TEST_P(RegistryConformance, UnknownNameIsNotFoundAtOnce) {
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { reader_->fetch("nobody.home", 10s); }), ErrorCode::NotFound);
  // An answer, not a wait for the timeout (sanitizers are slow).
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
}

TEST_P(RegistryConformance, InvalidNamesNeverReachTheWire) {
  for (const char* name : {"", "a..b", ".a", "a.", "a/b", "with space", "star.*", "gt.>", "ü"}) {
    EXPECT_EQ(error_code_of([&] { owner_->publish(name, sample_metadata(12), 0ms); }),
              ErrorCode::InvalidArgument)
        << name;
    EXPECT_EQ(error_code_of([&] { reader_->fetch(name, 1s); }), ErrorCode::InvalidArgument) << name;
    EXPECT_EQ(error_code_of([&] { reader_->wait_for(name, 1s); }), ErrorCode::InvalidArgument)
        << name;
    EXPECT_EQ(error_code_of([&] { owner_->withdraw(name); }), ErrorCode::InvalidArgument) << name;
  }
  EXPECT_EQ(error_code_of([&] { (void)owner_->serve("a..b", [](auto&, auto&) {}); }),
            ErrorCode::InvalidArgument);
}

// A TTL below zero means nothing on any channel: refused, not taken as "for ever".
TEST_P(RegistryConformance, NegativeTtlIsRefusedBeforeTheWire) {
  EXPECT_EQ(error_code_of([&] { owner_->publish("ok", sample_metadata(12), -1ms); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { reader_->fetch("ok", 2s); }), ErrorCode::NotFound);
}

TEST_P(RegistryConformance, TtlExpiryMakesTheNameUnknown) {
  const auto published_at = std::chrono::steady_clock::now();
  owner_->publish("short.lived", sample_metadata(6), 300ms);
  {
    auto orphan = world_->connect();  // its publisher gone: only the registry knows it
    orphan->publish("short.orphan", sample_metadata(7), 300ms);
  }
  owner_->publish("long.lived", sample_metadata(8), 60s);
  EXPECT_EQ(reader_->fetch("short.lived", 2s), sample_metadata(6));
  EXPECT_NO_THROW(reader_->fetch("short.orphan", 2s));

  // Time itself is what is tested here: one wait until past the TTL (and the HTTP sweep).
  std::this_thread::sleep_until(published_at + 450ms);
  EXPECT_EQ(error_code_of([&] { reader_->fetch("short.lived", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader_->fetch("short.orphan", 2s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader_->wait_for("short.orphan", 100ms); }), ErrorCode::Timeout);
  EXPECT_EQ(reader_->fetch("long.lived", 2s), sample_metadata(8));
  EXPECT_EQ(reader_->list(), std::vector<std::string>{"long.lived"});

  // Published again after expiring: answers again.
  owner_->publish("short.lived", sample_metadata(9), 0ms);
  EXPECT_EQ(reader_->fetch("short.lived", 2s), sample_metadata(9));
}

TEST_P(RegistryConformance, WaitForReturnsWhenPublished) {
  auto waiter = std::async(std::launch::async, [&] {
    auto started = std::chrono::steady_clock::now();
    auto metadata = reader_->wait_for("appears.later", 10s);
    return std::make_pair(metadata, std::chrono::steady_clock::now() - started);
  });
  std::this_thread::sleep_for(200ms);  // "later": after the waiter has started watching
  const auto published = std::chrono::steady_clock::now();
  owner_->publish("appears.later", sample_metadata(5), 0ms);
  auto [metadata, took] = waiter.get();
  EXPECT_EQ(metadata, sample_metadata(5));
  EXPECT_LT(std::chrono::steady_clock::now() - published, 1s);
  EXPECT_LT(took, 5s);
}

TEST_P(RegistryConformance, WaitForTimesOutAndSeesNoWithdrawnName) {
  owner_->publish("gone", sample_metadata(1), 0ms);
  owner_->withdraw("gone");
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { reader_->wait_for("gone", 200ms); }), ErrorCode::Timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 190ms);
  EXPECT_EQ(error_code_of([&] { reader_->wait_for("never.comes", 150ms); }), ErrorCode::Timeout);
}

// A caller that gives up (a cancelled Python task) stops its wait long before the timeout.
TEST_P(RegistryConformance, AbandonedWaitEndsEarly) {
  std::stop_source abandon;
  auto waiter = std::async(std::launch::async, [&] {
    return error_code_of([&] { reader_->wait_for("never.there", 30s, abandon.get_token()); });
  });
  std::this_thread::sleep_for(200ms);
  const auto start = std::chrono::steady_clock::now();
  abandon.request_stop();
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, world_->abandon_bound());
}

TEST_P(RegistryConformance, ManyWaitersWakeOnOnePublish) {
  constexpr int kWaiters = 20;
  std::vector<std::future<RdmaMetadata>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(
        std::async(std::launch::async, [&] { return reader_->wait_for("crowd.name", 10s); }));
  }
  std::this_thread::sleep_for(100ms);  // most are waiting by now; the others find it stored
  owner_->publish("crowd.name", sample_metadata(19), 0ms);
  for (auto& waiter : waiters) EXPECT_EQ(waiter.get(), sample_metadata(19));
}

TEST_P(RegistryConformance, HundredNamesPublishedAndFetchedConcurrently) {
  constexpr int kNames = 100;
  std::latch start(2 * kNames);
  std::vector<std::future<void>> publishers, fetchers;
  for (int i = 0; i < kNames; ++i) {
    fetchers.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      EXPECT_EQ(reader_->wait_for("many." + std::to_string(i), 20s), sample_metadata(i));
    }));
    publishers.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      owner_->publish("many." + std::to_string(i), sample_metadata(i), 0ms);
    }));
  }
  for (auto& f : publishers) f.get();
  for (auto& f : fetchers) f.get();
  EXPECT_EQ(reader_->list().size(), static_cast<std::size_t>(kNames));
}

// A stored document that is no metadata (an older or foreign registry, a corrupted store) is
// InvalidMetadata, and the error names what was asked for, in the same words on every channel.
TEST_P(RegistryConformance, GarbageUnderANameIsInvalidMetadataThatNamesIt) {
  for (const char* document :
       {R"({"version":1,"garbage":true})", "<html>hello</html>", "[1,2,3]"}) {
    auto reader = world_->connect_with_stored("stored.garbage", document);
    for (auto read : {+[](Channel& c) { c.fetch("stored.garbage", 2s); },
                      +[](Channel& c) { c.wait_for("stored.garbage", 2s); }}) {
      try {
        read(*reader);
        ADD_FAILURE() << document << ": returned";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata) << document << ": " << error.what();
        EXPECT_TRUE(error.message().starts_with("metadata under 'stored.garbage': "))
            << document << ": " << error.message();
      }
    }
  }
}

}  // namespace
}  // namespace memwire::sideband::conformance
