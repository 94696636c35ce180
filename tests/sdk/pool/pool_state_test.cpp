// A pool's own rules, through its internal state: which bytes are its blocks, whose tags it
// queues and how many, and who a token says a peer is.
#include "pool/pool_state.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <vector>

#include "support/error_code_of.hpp"

using namespace memwire;
using namespace memwire::detail;
using memwire::test_support::error_code_of;

namespace {

constexpr auto kWrite = OperationKind::Write;

PoolState::TagFilter filter(std::string_view from, std::string_view token = {},
                            TagKinds kinds = TagKinds::Writes) {
  return {from, token, kinds};
}

std::byte* at(std::uintptr_t address) { return reinterpret_cast<std::byte*>(address); }

PoolState pool_of(std::vector<BlockRegion> regions, PoolOptions options = {}) {
  for (auto& region : regions)
    if (region.stride == 0) region.stride = region.block_size;
  return PoolState(std::move(options), 1, std::move(regions));
}

TEST(PoolGaps, BlocksBackToBackLeaveNone) {
  EXPECT_FALSE(pool_of({{at(0x10000), 4096, 0, 100, {}}}).has_gaps());
  EXPECT_FALSE(pool_of({{at(0x10000), 4096, 8192, 1, {}}}).has_gaps()) << "one block, no gap";
}

TEST(PoolGaps, AStridedRegionLeavesGapsThatInterleavedRegionsFill) {
  EXPECT_TRUE(pool_of({{at(0x10000), 4096, 8192, 8, {}}}).has_gaps());
  // K and V interleaved block by block (a KV cache's layout): no byte is no block's.
  EXPECT_FALSE(
      pool_of({{at(0x10000), 4096, 8192, 8, {}}, {at(0x11000), 4096, 8192, 8, {}}}).has_gaps());
  // V's 7 blocks fill K's 7 gaps; starting one gap later, they leave the first one open.
  EXPECT_FALSE(
      pool_of({{at(0x10000), 4096, 8192, 8, {}}, {at(0x11000), 4096, 8192, 7, {}}}).has_gaps());
  EXPECT_TRUE(
      pool_of({{at(0x10000), 4096, 8192, 8, {}}, {at(0x13000), 4096, 8192, 6, {}}}).has_gaps());
  EXPECT_TRUE(
      pool_of({{at(0x10000), 4096, 8192, 8, {}}, {at(0x11000), 2048, 8192, 8, {}}}).has_gaps())
      << "V blocks half the size fill half of each gap";
}

TEST(PoolGaps, ARunOfBlocksHoldsARangeOnlyWhenNoGapLiesInTheSpans) {
  // K and V interleaved, then a second run elsewhere: two runs, each all blocks.
  auto pool = pool_of({{at(0x10000), 4096, 8192, 8, {}},
                       {at(0x11000), 4096, 8192, 8, {}},
                       {at(0x40000), 512, 0, 4, {}}});
  auto run = pool.block_run_holding(at(0x13000), 8192);
  EXPECT_EQ(run.data(), at(0x10000));
  EXPECT_EQ(run.size(), 16u * 4096);
  run = pool.block_run_holding(at(0x40100), 512);
  EXPECT_EQ(run.data(), at(0x40000));
  EXPECT_EQ(run.size(), 2048u);
  EXPECT_TRUE(pool.block_run_holding(at(0x1f000), 8192).empty()) << "past the run's end";
  EXPECT_TRUE(pool.block_run_holding(at(0x30000), 16).empty()) << "between the runs";
  EXPECT_TRUE(pool.block_run_holding(at(0x1000), 16).empty()) << "before every run";
  // A region with gaps no other fills: no run at all.
  EXPECT_TRUE(
      pool_of({{at(0x10000), 4096, 8192, 8, {}}}).block_run_holding(at(0x10000), 16).empty());
}

TEST(PoolGaps, PiecesMustLieInsideOneBlockOfAStridedRegion) {
  auto pool = pool_of({{at(0x10000), 4096, 8192, 8, {}}, {at(0x40000), 512, 0, 4, {}}});
  pool.check_blocks(0, 8192, 4096);
  pool.check_blocks(0, 8192 + 100, 1000);
  pool.check_blocks(1, 0, 2048);  // back to back: a run of blocks is fine
  EXPECT_EQ(error_code_of([&] { pool.check_blocks(0, 4096, 16); }), ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { pool.check_blocks(0, 4000, 200); }), ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { pool.check_blocks(0, 0, 8192); }), ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { pool.check_blocks(2, 0, 1); }), ErrorCode::AccessDenied);
}

TEST(PoolPeers, ATokenSaysWhoThePeerIs) {
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}});
  const Id128 shared = random_id();
  const auto granted = pool.grant("prefill-A");
  EXPECT_EQ(pool.grant("prefill-A"), granted);
  EXPECT_EQ(pool.identify(granted, shared, "whatever", 7),
            (PoolState::Peer{"prefill-A", true, {}, to_hex(granted)}))
      << "a granted peer is kept by its grant, not by its connection";
  EXPECT_EQ(pool.identify(shared, shared, "prefill-B", 7),
            (PoolState::Peer{"prefill-B", false, {}, to_hex(shared), 7}));
  EXPECT_EQ(error_code_of([&] { (void)pool.identify(shared, shared, "prefill-A", 7); }),
            ErrorCode::AccessDenied)
      << "a granted name is not for anyone holding the shared token";
  EXPECT_EQ(error_code_of([&] { (void)pool.identify(random_id(), shared, "x", 7); }),
            ErrorCode::AccessDenied);
  EXPECT_TRUE(pool.revoke("prefill-A"));
  EXPECT_FALSE(pool.admits(granted, shared));
  EXPECT_FALSE(pool.revoke("prefill-A"));
}

TEST(PoolQueue, EachPeerHasItsShareAndFailuresStayOutOfIt) {
  PoolOptions options;
  options.max_queued_per_peer = 2;
  options.max_queued_notifications = 3;
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}}, options);
  const PoolState::Peer a{"a", true, {}, {}}, b{"b", true, {}, {}}, c{"c", true, {}, {}};
  pool.deliver(a, "a0", kWrite);
  pool.deliver(a, "a1", kWrite);
  EXPECT_EQ(error_code_of([&] { pool.deliver(a, "a2", kWrite); }), ErrorCode::Transport);
  pool.fail(a, "a3", Error(ErrorCode::Cancelled, "gave up"), kWrite);  // queued apart
  pool.deliver(b, "b0", kWrite);
  EXPECT_EQ(error_code_of([&] { pool.deliver(c, "c0", kWrite); }), ErrorCode::Transport)
      << "the pool's own bound still holds";
  EXPECT_EQ(error_code_of(
                [&] { (void)pool.wait_for_tag("a3", std::chrono::milliseconds(0), filter("a")); }),
            ErrorCode::Cancelled);
  EXPECT_EQ(pool.wait_for_tag("a1", std::chrono::milliseconds(0), filter("a")).tag, "a1");
  pool.deliver(a, "a4", kWrite);
  pool.fail(a, "", Error(ErrorCode::PeerLost, "untagged"),
            kWrite);  // no wait is for it: not queued
  EXPECT_EQ(pool.queued(), 3u);
}

// Issue 44 item 3: shares kept by what the owner knows (a grant, a connection), never by the
// name a shared-token peer chose; granted peers keep room the shared token cannot take; reads
// under the shared token have a share of their own.
TEST(PoolQueue, NoNameAShareTokenPeerChoosesTakesAnothersRoom) {
  PoolOptions options;
  options.max_queued_notifications = 8;
  options.max_queued_shared = 5;
  options.max_queued_per_connection = 3;
  options.max_queued_shared_reads = 2;
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}}, options);
  const PoolState::Peer one{"prefill-A", false, {}, {}, 1}, also_one{"prefill-B", false, {}, {}, 1},
      two{"prefill-A", false, {}, {}, 2}, three{"x", false, {}, {}, 3},
      granted{"prefill-A", true, {}, {}};
  const auto message = [&](const PoolState::Peer& peer, OperationKind kind) {
    try {
      pool.deliver(peer, "refused", kind);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::Transport);
      return std::string(error.what());
    }
    return std::string("delivered");
  };
  pool.deliver(one, "1a", kWrite);
  pool.deliver(also_one, "1b", kWrite);  // another name, the same connection: the same share
  pool.deliver(one, "1c", OperationKind::Read);
  EXPECT_NE(message(also_one, kWrite).find("max_queued_per_connection"), std::string::npos);
  pool.deliver(two, "2a", OperationKind::Read);  // the same name, another connection
  EXPECT_NE(message(two, OperationKind::Read).find("max_queued_shared_reads"), std::string::npos);
  pool.deliver(two, "2b", kWrite);  // reads are full, writes are not
  EXPECT_NE(message(three, kWrite).find("max_queued_shared"), std::string::npos);
  // The rest of the queue is the granted peers', whatever name the others gave themselves.
  pool.deliver(granted, "g0", kWrite);
  pool.deliver(granted, "g1", kWrite);
  pool.deliver(granted, "g2", kWrite);
  EXPECT_NE(message(granted, kWrite).find("max_queued_notifications"), std::string::npos);
  // Taking a shared-token tag gives its room back to the shared share.
  EXPECT_EQ(pool.wait_for_tag("1a", std::chrono::milliseconds(0), filter("prefill-A")).tag, "1a");
  pool.deliver(three, "3a", kWrite);
  EXPECT_EQ(pool.wait_for_tag("g0", std::chrono::milliseconds(0), filter("prefill-A")).tag, "g0");
  EXPECT_NE(message(three, kWrite).find("max_queued_shared"), std::string::npos)
      << "room the granted peer left is not the shared token's";
  pool.deliver(granted, "g3", kWrite);
  EXPECT_EQ(pool.queued(), 8u);
}

TEST(PoolQueue, SharedTokenFailuresNeverPushOutAGrantedPeers) {
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}});
  const PoolState::Peer shared{"prefill-A", false, {}, "s", 1}, granted{"prefill-A", true, {}, "g"};
  pool.fail(granted, "layer/0", Error(ErrorCode::Cancelled, "gave up"), kWrite);
  for (int n = 0; n < 2000; ++n)
    pool.fail(shared, "layer/" + std::to_string(n), Error(ErrorCode::Cancelled, "flood"), kWrite);
  EXPECT_EQ(error_code_of([&] {
              (void)pool.wait_for_tag("layer/0", std::chrono::milliseconds(0),
                                      filter("prefill-A", "g"));
            }),
            ErrorCode::Cancelled)
      << "the granted peer's failure was pushed out by the shared token's";
  EXPECT_EQ(pool.queued(), 1024u) << "the shared-token peers' failures stay bounded";
}

TEST(PoolQueue, AFullShareOfSharedTokenFailuresTakesNoMoreWithoutWalkingTheQueue) {
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}});
  const PoolState::Peer shared{"decode", false, {}, "s", 1};
  for (int n = 0; n < 1024; ++n)
    pool.fail(shared, "old/" + std::to_string(n), Error(ErrorCode::Cancelled, "flood"), kWrite);
  pool.fail(shared, "new", Error(ErrorCode::Cancelled, "one more"), kWrite);
  EXPECT_FALSE(pool.try_wait_for_tag("new", filter("decode", "s")).has_value())
      << "a full share queued the new failure, which meant finding and dropping the oldest";
  EXPECT_EQ(error_code_of([&] { (void)pool.try_wait_for_tag("old/0", filter("decode", "s")); }),
            ErrorCode::Cancelled)
      << "the oldest shared-token failure stays";
  EXPECT_EQ(pool.queued(), 1023u);
}

// Whether `fd` is readable now; reads it (an eventfd's 8 bytes) when it is.
bool readable(int fd) {
  pollfd watched{fd, POLLIN, 0};
  if (::poll(&watched, 1, 0) != 1) return false;
  std::uint64_t count = 0;
  return ::read(fd, &count, sizeof count) == sizeof count;
}

TEST(PoolQueue, AnEventLoopIsWokenByItsFdAndTakesWithoutWaiting) {
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}});
  const PoolState::Peer a{"a", true, {}, {}}, b{"b", false, {}, {}};
  pool.deliver(a, "early", kWrite);
  const int fd = pool.readiness_fd();
  EXPECT_TRUE(readable(fd)) << "what was queued before the fd existed counts as news";
  EXPECT_FALSE(readable(fd));
  EXPECT_FALSE(pool.try_wait_for_tag("late", filter({})).has_value());
  pool.deliver(b, "late", kWrite);
  EXPECT_TRUE(readable(fd));
  EXPECT_FALSE(pool.try_wait_for_tag("late", filter("a")).has_value()) << "from another peer";
  const auto late = pool.try_wait_for_tag("late", filter("b"));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(*late, (Notification{"b", "late", "", false, {}, OperationKind::Write, {}}));
  EXPECT_EQ(pool.try_next()->tag, "early");
  EXPECT_FALSE(pool.try_next().has_value());
  pool.fail(a, "broken", Error(ErrorCode::Transport, "connection lost"), kWrite);
  EXPECT_TRUE(readable(fd));
  EXPECT_EQ(error_code_of([&] { (void)pool.try_next(); }), ErrorCode::PeerLost);
  pool.close(std::chrono::milliseconds(0));
  EXPECT_TRUE(readable(fd)) << "a close wakes the loop, whose next try ends its waits";
  EXPECT_EQ(error_code_of([&] { (void)pool.try_next(); }), ErrorCode::Cancelled);
}

TEST(PoolQueue, AWaitTakesTheKindsAndTokenItAskedForAndOnlyTheirFailuresEndIt) {
  auto pool = pool_of({{at(0x10000), 4096, 0, 4, {}}});
  // Two peers calling themselves alike, under two tokens.
  const PoolState::Peer shared{"prefill-A", false, {}, "aa"}, granted{"prefill-A", true, "r", "bb"};
  pool.deliver(shared, "r/0", OperationKind::Read);
  EXPECT_FALSE(pool.try_wait_for_tag("r/0", filter({})).has_value())
      << "a read's tag passed for a write";
  EXPECT_EQ(pool.try_wait_for_tag("r/0", filter({}, {}, TagKinds::Reads))->kind,
            OperationKind::Read);
  pool.deliver(shared, "r/1", kWrite);
  EXPECT_FALSE(pool.try_wait_for_tag("r/1", filter({}, "bb")).has_value()) << "another token's";
  EXPECT_TRUE(pool.try_wait_for_tag("r/1", filter("prefill-A")).has_value()) << "by name: a label";
  // Failures: a read's ends no wait for a write; another token's ends no wait of this one, even
  // under the stream's prefix.
  pool.fail(granted, "r/2", Error(ErrorCode::Cancelled, "read gave up"), OperationKind::Read);
  pool.fail(shared, "r/9", Error(ErrorCode::Cancelled, "not yours"), kWrite);
  EXPECT_EQ(error_code_of([&] {
              (void)pool.wait_for_tag("r/2", std::chrono::milliseconds(0), filter({}, "bb"), "r/");
            }),
            ErrorCode::Timeout);
  EXPECT_EQ(error_code_of([&] {
              (void)pool.wait_for_tag("r/2", std::chrono::milliseconds(0),
                                      filter({}, "bb", TagKinds::Reads));
            }),
            ErrorCode::Cancelled);
  EXPECT_EQ(error_code_of([&] {
              (void)pool.wait_for_tag("r/3", std::chrono::milliseconds(0), filter({}, "aa"), "r/");
            }),
            ErrorCode::Cancelled)
      << "its own token's cancelled stream ends it";
}

}  // namespace
