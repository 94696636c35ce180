// Pools' metadata by name over every Channel, the same cases over HTTP and NATS: published by
// the owner, fetched by a reader and used to move bytes between two connectors; kept apart from
// operations' names; expired; waited for; cached by the reader until a transfer finds it stale.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "memwire/error.hpp"
#include "sideband/conformance/channel_world.hpp"
#include "sideband/pool_cases.hpp"
#include "support/error_code_of.hpp"
#include "support/metadata_samples.hpp"
#include "support/operation_waits.hpp"

namespace memwire::sideband::conformance {
namespace {

using namespace std::chrono_literals;
using pool_cases::PoolSide;
using pool_cases::read_three_blocks;
using test_support::error_code_of;
using test_support::failure_code;
using test_support::sample_metadata;

class PoolConformance : public ChannelConformance {};
MEMWIRE_CHANNEL_CONFORMANCE(PoolConformance);

TEST_P(PoolConformance, PublishedPoolIsFetchedByNameAndMovesBytes) {
  PoolSide owner(1000), reader;
  owner_->publish_pool("kv.worker-0", owner.pool->metadata(), 0ms);
  auto fetched = reader_->fetch_pool("kv.worker-0", 2s);
  EXPECT_EQ(fetched, owner.pool->metadata());
  ASSERT_EQ(read_three_blocks(reader, fetched), OperationStatus::Complete);
  EXPECT_TRUE(reader.holds(0, 1001));
  EXPECT_TRUE(reader.holds(1, 1002));
  EXPECT_TRUE(reader.holds(7, 1005));

  owner_->withdraw_pool("kv.worker-0");
  EXPECT_EQ(error_code_of([&] { reader_->fetch_pool("kv.worker-0", 2s); }), ErrorCode::NotFound);
  EXPECT_NO_THROW(owner_->withdraw_pool("kv.worker-0"));  // idempotent
}

TEST_P(PoolConformance, UnknownPoolIsNotFoundAndBadNamesNeverLeave) {
  EXPECT_EQ(error_code_of([&] { reader_->fetch_pool("nobody.home", 2s); }), ErrorCode::NotFound);
  PoolSide owner;
  EXPECT_EQ(error_code_of([&] { owner_->publish_pool("a/b", owner.pool->metadata(), 0ms); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { reader_->fetch_pool("a..b", 2s); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { reader_->wait_for_pool("a/b", 2s); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { owner_->withdraw_pool(""); }), ErrorCode::InvalidArgument);
}

TEST_P(PoolConformance, NegativeTtlIsRefusedBeforeTheWire) {
  PoolSide owner;
  EXPECT_EQ(error_code_of([&] { owner_->publish_pool("kv", owner.pool->metadata(), -1ms); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { reader_->fetch_pool("kv", 2s); }), ErrorCode::NotFound);
}

TEST_P(PoolConformance, ExpiredPoolIsNotFound) {
  PoolSide owner;
  owner_->publish_pool("brief", owner.pool->metadata(), 100ms);
  EXPECT_EQ(reader_->fetch_pool("brief", 2s), owner.pool->metadata());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(error_code_of([&] { reader_->fetch_pool("brief", 2s); }), ErrorCode::NotFound);
}

TEST_P(PoolConformance, PoolAndOperationOfTheSameNameStayApart) {
  PoolSide owner;
  owner_->publish("shared.name", sample_metadata(3), 0ms);
  owner_->publish_pool("shared.name", owner.pool->metadata(), 0ms);
  EXPECT_EQ(reader_->fetch("shared.name", 2s), sample_metadata(3));
  EXPECT_EQ(reader_->fetch_pool("shared.name", 2s), owner.pool->metadata());
  EXPECT_EQ(reader_->list(), std::vector<std::string>{"shared.name"});  // operations only

  owner_->withdraw_pool("shared.name");
  EXPECT_EQ(reader_->fetch("shared.name", 2s), sample_metadata(3));
  owner_->publish_pool("shared.name", owner.pool->metadata(), 0ms);
  owner_->withdraw("shared.name");
  EXPECT_EQ(reader_->fetch_pool("shared.name", 2s), owner.pool->metadata());
  EXPECT_EQ(error_code_of([&] { reader_->fetch("shared.name", 2s); }), ErrorCode::NotFound);
  // A pool only: nothing under the operation's name to fetch or list.
  EXPECT_TRUE(reader_->list().empty());
}

TEST_P(PoolConformance, WaitForPoolReturnsOncePublished) {
  PoolSide owner;
  auto waiting =
      std::async(std::launch::async, [&] { return reader_->wait_for_pool("late", 10s); });
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  owner_->publish("late", sample_metadata(4), 0ms);  // an operation of that name: still waiting
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  owner_->publish_pool("late", owner.pool->metadata(), 0ms);
  EXPECT_EQ(waiting.get(), owner.pool->metadata());
  EXPECT_EQ(error_code_of([&] { reader_->wait_for_pool("never", 100ms); }), ErrorCode::Timeout);
}

// A stored document that is no pool's (garbage, or an operation's metadata) is InvalidMetadata
// that names the pool.
TEST_P(PoolConformance, StoredDocumentThatIsNoPoolIsInvalidMetadata) {
  for (const std::string& document :
       {std::string(R"({"memwire_pool": 1})"), sample_metadata(1).to_json()}) {
    auto reader = world_->connect_with_stored("stored", document);
    try {
      (void)reader->fetch_pool("stored", 2s);
      ADD_FAILURE() << document << ": returned";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata) << error.what();
      // In the same words on every channel.
      EXPECT_TRUE(error.message().starts_with("pool metadata under 'stored': ")) << error.message();
    }
    EXPECT_EQ(error_code_of([&] { reader->wait_for_pool("stored", 2s); }),
              ErrorCode::InvalidMetadata)
        << document;
  }
}

// The reader's cache: one fetch per name, until a transfer shows the entry stale.
TEST_P(PoolConformance, CacheFetchesOnceAndRefetchesAfterExpired) {
  PoolSide reader;
  std::vector<std::byte> there(pool_cases::kBlocks * pool_cases::kBlock);
  Connector owner(pool_cases::tcp_only());
  std::optional<Pool> pool(owner.register_pool({{there.data(), pool_cases::kBlock, 0, 8, {}}}));
  test_support::fill_pattern(std::span(there).subspan(1 * pool_cases::kBlock, pool_cases::kBlock),
                             71);
  owner_->publish_pool("cached", pool->metadata(), 0ms);

  PoolMetadataCache cache(*reader_);
  auto first = cache.get("cached", 2s);
  owner_->withdraw_pool("cached");
  EXPECT_EQ(cache.get("cached", 2s), first);  // from memory: the registry no longer has it
  EXPECT_EQ(cache.size(), 1u);

  // The owner re-registers: the cached metadata is stale and refused as Expired.
  pool.reset();
  pool.emplace(owner.register_pool({{there.data(), pool_cases::kBlock, 0, 8, {}}}));
  owner_->publish_pool("cached", pool->metadata(), 0ms);
  auto stale = reader.connector.read_blocks(cache.get("cached", 2s), {{1, 0}}, *reader.pool);
  ASSERT_EQ(failure_code(stale, 10s), ErrorCode::Expired);

  // Forgetting other metadata than the cached entry keeps it; forgetting the stale one drops it.
  cache.forget("cached", pool->metadata());
  EXPECT_EQ(cache.get("cached", 2s), first);
  cache.forget("cached", first);
  EXPECT_EQ(cache.size(), 0u);
  auto fresh = cache.get("cached", 2s);
  EXPECT_EQ(fresh, pool->metadata());
  ASSERT_EQ(read_three_blocks(reader, fresh), OperationStatus::Complete);
  EXPECT_TRUE(reader.holds(0, 71));

  cache.forget("cached");
  owner_->withdraw_pool("cached");
  EXPECT_EQ(error_code_of([&] { cache.get("cached", 2s); }), ErrorCode::NotFound);
}

}  // namespace
}  // namespace memwire::sideband::conformance
