// Pool metadata: compact for a KV cache's pool, strict about what it reads, and checked with
// the same limits where it is made (register_pool) and where it is read (from_json).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"

using namespace memwire;
using memwire::test_support::error_code_of;

namespace {

Endpoint endpoint() { return {"prefill-0", "host-a", {{"tcp", "10.0.0.1:4711", {}, {}}}}; }

const std::string kKey(32, 'a');
const std::string kToken(32, 'b');

// 80 layers x (K, V) = 160 regions of 2,000 blocks of 16 KiB, in one allocation.
PoolMetadata kv_cache_pool() {
  std::vector<RemoteRegion> regions;
  const std::uint64_t region_bytes = 2000ull * 16384;
  for (std::uint64_t r = 0; r < 160; ++r)
    regions.push_back({Device{}, 0x7f0000000000ull + r * region_bytes, 16384, 16384, 2000});
  return PoolMetadata({.name = "kv",
                       .generation = 3,
                       .regions = regions,
                       .key = kKey,
                       .endpoint = endpoint(),
                       .token = kToken});
}

TEST(PoolMetadata, AKvCachePoolFitsInAFewHundredBytes) {
  const auto metadata = kv_cache_pool();
  const auto json = metadata.to_json();
  EXPECT_LE(json.size(), 4096u) << json;
  EXPECT_EQ(metadata.block_count(), 320000u);
  const auto back = PoolMetadata::from_json(json);
  EXPECT_EQ(back, metadata);
  EXPECT_EQ(back.regions().size(), 160u);
  EXPECT_EQ(back.generation(), 3u);
  EXPECT_EQ(back.name(), "kv");
  const auto place = back.locate(2000 * 7 + 5);
  EXPECT_EQ(place.region, 7u);
  EXPECT_EQ(place.offset, 5u * 16384);
  EXPECT_EQ(place.size, 16384u);
  EXPECT_EQ(error_code_of([&] { (void)back.locate(320000); }), ErrorCode::InvalidArgument);
}

TEST(PoolMetadata, RegionsOfEveryShapeSurviveTheRoundTrip) {
  std::vector<RemoteRegion> regions{
      {Device{}, 0x1000, 64, 128, 10},    // spaced blocks
      {Device{}, 0x9000, 4096, 4096, 1},  // one block
      {Device{}, 0x20000, 512, 512, 3},   // three regions evenly spaced ...
      {Device{}, 0x30000, 512, 512, 3},   // ...
      {Device{}, 0x40000, 512, 512, 3},   // ...
      {Device{}, 0x41000, 512, 1024, 3},  // ... then one that differs in stride
      {Device{}, 0x100, 8, 8, 2},         // lower than the one before
  };
  PoolMetadata metadata({.name = "mixed",
                         .generation = 1,
                         .regions = regions,
                         .key = kKey,
                         .endpoint = endpoint(),
                         .token = kToken});
  const auto back = PoolMetadata::from_json(metadata.to_json());
  EXPECT_EQ(back.regions(), metadata.regions());
  EXPECT_EQ(back.block_count(), 10u + 1 + 9 + 3 + 2);
}

// Replaces one field of a valid document.
std::string with(const char* field, nlohmann::json value) {
  auto document = nlohmann::json::parse(kv_cache_pool().to_json());
  document[field] = std::move(value);
  return document.dump();
}

std::string with_group(const char* field, nlohmann::json value) {
  auto document = nlohmann::json::parse(kv_cache_pool().to_json());
  document["regions"][0][field] = std::move(value);
  return document.dump();
}

TEST(PoolMetadata, MalformedDocumentsAreRefusedNamingTheField) {
  auto refused = [](const std::string& text) {
    try {
      (void)PoolMetadata::from_json(text);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata) << error.what();
      return std::string(error.what());
    }
    ADD_FAILURE() << "accepted: " << text;
    return std::string();
  };
  EXPECT_NE(refused("not json").find("not JSON"), std::string::npos);
  EXPECT_NE(refused("[]").find("object"), std::string::npos);
  EXPECT_NE(refused(with("extra", 1)).find("'extra'"), std::string::npos);
  EXPECT_NE(refused(with("memwire_pool", 2)).find("version 2"), std::string::npos);
  EXPECT_NE(refused(with("generation", -1)).find("'generation'"), std::string::npos);
  EXPECT_NE(refused(with("regions", nlohmann::json::array())).find("'regions'"), std::string::npos);
  EXPECT_NE(refused(with("key", "short")).find("key"), std::string::npos);
  EXPECT_NE(refused(with("token", 5)).find("token"), std::string::npos);
  EXPECT_NE(refused(with("endpoint", "x")).find("endpoint"), std::string::npos);
  EXPECT_NE(refused(with_group("device", "tpu:0")).find("device"), std::string::npos);
  EXPECT_NE(refused(with_group("base", 0)).find("base"), std::string::npos);
  EXPECT_NE(refused(with_group("block_size", 0)).find("regions[0]"), std::string::npos);
  EXPECT_NE(refused(with_group("stride", 1)).find("stride"), std::string::npos);
  EXPECT_NE(refused(with_group("count", 0)).find("regions[0]"), std::string::npos);
  EXPECT_NE(refused(with_group("repeat", 1)).find("repeat"), std::string::npos);
  EXPECT_NE(refused(with_group("step", 0)).find("step"), std::string::npos);
  EXPECT_NE(refused(with_group("repeat", 5000)).find("4096 regions"), std::string::npos);
  EXPECT_NE(refused(with_group("count", 1ull << 40)).find("blocks"), std::string::npos);
  EXPECT_NE(refused(with_group("base", UINT64_MAX - 10)).find("wrap"), std::string::npos);
  EXPECT_NE(refused(with_group("step", UINT64_MAX / 2)).find("wrap"), std::string::npos);
  std::string deep(100, '[');
  EXPECT_NE(refused(deep).find("deep"), std::string::npos);
  EXPECT_NE(refused(std::string(PoolMetadata::kMaxJsonBytes + 1, ' ')).find("bytes"),
            std::string::npos);
}

// The field's path is data (MetadataError::field), the same path a reader of the document sees.
TEST(PoolMetadata, ARefusalCarriesTheFieldsPath) {
  auto document = nlohmann::json::parse(kv_cache_pool().to_json());
  document["regions"][0]["stride"] = 1;
  try {
    (void)PoolMetadata::from_json(document.dump());
    ADD_FAILURE() << "accepted overlapping blocks";
  } catch (const MetadataError& error) {
    EXPECT_EQ(error.field(), "regions[0].stride");
    EXPECT_EQ(error.reason(), "smaller than the block size: blocks would overlap");
  }
  document = nlohmann::json::parse(kv_cache_pool().to_json());
  document["key"] = "short";
  try {
    (void)PoolMetadata::from_json(document.dump());
    ADD_FAILURE() << "accepted a short key";
  } catch (const MetadataError& error) {
    EXPECT_EQ(std::string(error.what()),
              "invalid metadata: pool metadata field 'key': must be 32 hex digits");
  }
}

TEST(PoolMetadata, RegisterPoolAppliesTheReadersLimits) {
  ConnectorOptions options;
  options.transports = {"tcp"};
  Connector connector(options);
  std::vector<std::byte> memory(PoolMetadata::kMaxRegions * 2);
  auto code = [&](std::vector<BlockRegion> regions) {
    return error_code_of([&] { (void)connector.register_pool(std::move(regions)); });
  };
  EXPECT_EQ(code({}), ErrorCode::InvalidArgument);
  EXPECT_EQ(code({{nullptr, 64, 0, 1, {}}}), ErrorCode::InvalidArgument);
  // The reader's rule, in the caller's words: which region, which field.
  try {
    (void)connector.register_pool({{memory.data(), 64, 0, 1, {}}, {nullptr, 64, 0, 1, {}}});
    ADD_FAILURE() << "accepted a null region";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()),
              "invalid argument: pool regions[1].base: must not be null");
  }
  EXPECT_EQ(code({{memory.data(), 0, 0, 1, {}}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(code({{memory.data(), 64, 32, 4, {}}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(code({{memory.data(), 64, 0, 0, {}}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(code({{memory.data(), 64, 0, 1, Device(DeviceKind::Cuda, 0)}}),
            ErrorCode::InvalidArgument);
  std::vector<BlockRegion> too_many(PoolMetadata::kMaxRegions + 1,
                                    BlockRegion{memory.data(), 1, 0, 1, {}});
  // Distinct, unevenly spaced regions: none written as a group.
  for (std::size_t r = 0; r < too_many.size(); ++r)
    too_many[r].base = memory.data() + (r * r) % memory.size();
  EXPECT_EQ(code(too_many), ErrorCode::InvalidArgument);
  too_many.pop_back();
  auto most = connector.register_pool(too_many);
  EXPECT_EQ(most.block_count(), PoolMetadata::kMaxRegions);
  // What it hands out, a reader takes.
  EXPECT_EQ(PoolMetadata::from_json(most.metadata().to_json()).block_count(),
            PoolMetadata::kMaxRegions);
}

TEST(PoolMetadata, APoolKnowsItsBlocksUntilClosed) {
  ConnectorOptions options;
  options.transports = {"tcp"};
  Connector connector(options);
  std::vector<std::byte> memory(4096);
  auto pool = connector.register_pool({{memory.data(), 1024, 0, 4, {}}});
  EXPECT_EQ(pool.metadata().endpoint().transports.size(), 1u);
  EXPECT_EQ(pool.block(3), memory.data() + 3072);
  EXPECT_EQ(error_code_of([&] { (void)pool.block(4); }), ErrorCode::InvalidArgument);
  pool.close();
  EXPECT_EQ(error_code_of([&] { (void)pool.metadata(); }), ErrorCode::InvalidArgument);
}

// A wait in another thread stands on the pool while its owner closes it: it ends with
// Cancelled, and nothing it uses goes away under it (TSan and ASan builds run this).
TEST(PoolMetadata, ClosingAPoolEndsTheWaitsOfOtherThreads) {
  using namespace std::chrono_literals;
  ConnectorOptions options;
  options.transports = {"tcp"};
  Connector connector(options);
  std::vector<std::byte> memory(4096);
  auto pool = connector.register_pool({{memory.data(), 1024, 0, 4, {}}});
  const int fd = pool.notification_fd();
  EXPECT_GE(fd, 0);
  auto next = std::async(std::launch::async,
                         [&] { return error_code_of([&] { (void)pool.next_notification(30s); }); });
  auto tagged = std::async(std::launch::async, [&] {
    return error_code_of([&] { (void)pool.wait_for_tag("t", 30s); });
  });
  std::this_thread::sleep_for(
      50ms);  // most likely both inside their waits (a later one ends alike)
  const auto began = std::chrono::steady_clock::now();
  pool.close();
  EXPECT_EQ(next.get(), ErrorCode::Cancelled);
  EXPECT_EQ(tagged.get(), ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s);
  EXPECT_EQ(error_code_of([&] { (void)pool.try_next_notification(); }), ErrorCode::Cancelled);
  EXPECT_EQ(error_code_of([&] { (void)pool.metadata(); }), ErrorCode::InvalidArgument);
}

}  // namespace
