// How block pairs, whole or sliced, become the runs a transport moves: slices that meet on
// both sides join into one run (one piece, one work request), others stay apart.
#include "pool/block_plan.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "pool/pool_state.hpp"
#include "support/error_code_of.hpp"

using namespace memwire;
using namespace memwire::detail;

namespace {

constexpr std::uint64_t kLarge = 4096, kSmall = 1024;
constexpr std::uintptr_t kLocalBase = 0x100000, kRemoteBase = 0x700000;

// A pool of this process: only its geometry matters, no byte of it is touched.
std::unique_ptr<PoolState> local_pool(std::vector<BlockRegion> regions) {
  std::vector<RemoteRegion> described;
  for (auto& region : regions) {
    if (region.stride == 0) region.stride = region.block_size;
    described.push_back({{},
                         reinterpret_cast<std::uintptr_t>(region.base),
                         region.block_size,
                         region.stride,
                         region.count});
  }
  auto pool = std::make_unique<PoolState>(PoolOptions{}, 1, std::move(regions));
  pool->set_metadata(PoolMetadata({.name = "local",
                                   .generation = 1,
                                   .regions = std::move(described),
                                   .key = std::string(32, 'a'),
                                   .endpoint = {"here", "host", {}},
                                   .token = std::string(32, 'b')}));
  return pool;
}

PoolMetadata remote_pool(std::uint64_t block_size, std::uint64_t count) {
  return PoolMetadata({.name = "remote",
                       .generation = 1,
                       .regions = {{{}, kRemoteBase, block_size, block_size, count}},
                       .key = std::string(32, 'c'),
                       .endpoint = {"there", "host", {}},
                       .token = std::string(32, 'd')});
}

void* at(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

TEST(BlockPlan, FourSmallBlocksIntoEachOfTwoLargeOnesMoveAsOneRun) {
  auto local = local_pool({{at(kLocalBase), kLarge, 0, 8, {}}});
  std::vector<BlockPair> pairs;
  for (std::uint64_t i = 0; i < 8; ++i)
    pairs.push_back({.remote = i, .local = 2 + i / 4, .local_offset = (i % 4) * kSmall});
  const auto plan =
      plan_blocks(pairs, remote_pool(kSmall, 32), *local, BlockSlice{.length = kSmall});
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_EQ(plan.segments[0].local, reinterpret_cast<std::byte*>(kLocalBase + 2 * kLarge));
  EXPECT_EQ(plan.segments[0].remote_offset, 0u);
  EXPECT_EQ(plan.segments[0].length, 8 * kSmall);
  EXPECT_EQ(plan.bytes, 8 * kSmall);
}

TEST(BlockPlan, HalvesOfConsecutiveBlocksStayApartWhereTheyDoNotMeet) {
  // Decode TP 2, rank 1: the second half of each prefill block, into consecutive blocks of half
  // the size: consecutive here, not there.
  auto local = local_pool({{at(kLocalBase), kLarge / 2, 0, 8, {}}});
  std::vector<BlockPair> pairs{{0, 0}, {1, 1}, {2, 2}};
  const auto plan = plan_blocks(pairs, remote_pool(kLarge, 8), *local,
                                BlockSlice{.remote_offset = kLarge / 2, .length = kLarge / 2});
  ASSERT_EQ(plan.segments.size(), 3u);
  for (std::uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.segments[i].remote_offset, i * kLarge + kLarge / 2);
    EXPECT_EQ(plan.segments[i].local, reinterpret_cast<std::byte*>(kLocalBase + i * kLarge / 2));
    EXPECT_EQ(plan.segments[i].length, kLarge / 2);
  }
}

TEST(BlockPlan, SlicesThatMeetAcrossABlockBoundaryJoin) {
  auto local = local_pool({{at(kLocalBase), kLarge, 0, 8, {}}});
  // The last quarter of remote block 0 and the first of block 1, side by side in local block 5.
  std::vector<BlockPair> pairs{{.remote = 0, .local = 5, .remote_offset = 3 * kSmall},
                               {.remote = 1, .local = 5, .local_offset = kSmall}};
  const auto plan =
      plan_blocks(pairs, remote_pool(kLarge, 8), *local, BlockSlice{.length = kSmall});
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_EQ(plan.segments[0].remote_offset, 3 * kSmall);
  EXPECT_EQ(plan.segments[0].length, 2 * kSmall);
}

TEST(BlockPlan, RunsNeverJoinAcrossRegions) {
  // Two local regions back to back in memory: still two runs, one per region (what verbs
  // registers per region).
  auto local = local_pool(
      {{at(kLocalBase), kLarge, 0, 2, {}}, {at(kLocalBase + 2 * kLarge), kLarge, 0, 2, {}}});
  const auto plan = plan_blocks({{0, 1}, {1, 2}}, remote_pool(kLarge, 4), *local, std::nullopt);
  ASSERT_EQ(plan.segments.size(), 2u);
  EXPECT_EQ(plan.segments[0].local_region, 0u);
  EXPECT_EQ(plan.segments[1].local_region, 1u);
}

TEST(BlockPlan, ASliceMustFitEveryPairsBlocksOnBothSides) {
  using memwire::test_support::error_code_of;
  auto local = local_pool({{at(kLocalBase), kSmall, 0, 8, {}}});
  const auto remote = remote_pool(kLarge, 8);
  EXPECT_EQ(
      error_code_of([&] {
        plan_blocks({{0, 0}}, remote, *local, BlockSlice{.remote_offset = 3073, .length = kSmall});
      }),
      ErrorCode::SizeMismatch);
  EXPECT_EQ(error_code_of([&] {
              plan_blocks({{0, 0}}, remote, *local, BlockSlice{.length = kSmall + 1});
            }),
            ErrorCode::SizeMismatch);
  // The exact fit on both sides is fine.
  EXPECT_EQ(
      plan_blocks({{0, 7}}, remote, *local, BlockSlice{.remote_offset = 3072, .length = kSmall})
          .bytes,
      kSmall);
}

}  // namespace
