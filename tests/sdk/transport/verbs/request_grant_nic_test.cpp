// Request grants on verbs are enforced by the NIC (issue 32 item 2): a raw QP that holds a
// request grant's keys can write its blocks, and the device refuses a write outside them,
// after close(), and after the lease, with nothing landed. Also: what binding a grant's
// windows costs, per block and per request (printed; rxe under TCG is no performance figure).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "memwire/memwire.hpp"
#include "pool/grant_windows.hpp"
#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/raw_verbs_peer.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = 4096;

ConnectorOptions with_access(const std::string& access) {
  auto options = conformance_options("verbs");
  if (!access.empty()) options.rdma.access = access;
  return options;
}

struct Fixture {
  explicit Fixture(std::size_t blocks, const std::string& access = {})
      : owner(with_access(access)), memory(blocks * kBlock), count(blocks) {
    pool.emplace(owner.register_pool({{memory.data(), kBlock, 0, count, {}}}));
  }
  std::string address() const { return pool->metadata().endpoint().transports.at(0).address; }
  std::uint64_t block_address(std::size_t index) const {
    return reinterpret_cast<std::uintptr_t>(memory.data()) + index * kBlock;
  }
  bool untouched(std::size_t index) const {
    for (std::size_t i = 0; i < kBlock; ++i)
      if (memory[index * kBlock + i] != std::byte{0}) return false;
    return true;
  }
  std::size_t windows(const BlockGrant& grant) const {
    return detail::grant_windows(grant.metadata(), *grant.metadata().scope()).size();
  }
  Connector owner;
  std::vector<std::byte> memory;
  std::size_t count;
  std::optional<Pool> pool;
};

class RequestGrantOnTheNic : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = transport_unavailable("verbs")) GTEST_SKIP() << *reason;
  }
  std::vector<std::byte> bytes_ = std::vector<std::byte>(kBlock, std::byte{'x'});
};

// Bounds by the device: in a PD of the connection's own, a region per run of granted blocks.
// Type-2 windows (the default where the device has them) bound over a run are the same on
// hardware, but rxe (Linux 6.1, rxe_resp.c check_rkey) checks a window's accesses against its
// MR's range, not the window's: under rxe the run's bounds hold in connection_pd mode only.
void refuses_the_rest(const std::string& access, std::vector<std::byte> bytes) {
  Fixture f(16, access);
  auto grant = f.pool->grant("raw-test-peer", "req-1", {2, 3, 7}, Access::Write, 60s);
  ASSERT_EQ(f.windows(grant), 2u);
  {
    RawVerbsPeer raw(f.address());
    const auto keys = raw.grant_begin(grant.metadata(), 1, OperationKind::Write, 2);
    ASSERT_TRUE(keys.accepted) << keys.text;
    EXPECT_EQ(raw.access(false, bytes, f.block_address(3), keys.rkeys[0]), IBV_WC_SUCCESS);
    EXPECT_FALSE(f.untouched(3));
  }
  // Just past the run, just before it, and between the runs: each under each key.
  for (std::size_t block : {4u, 1u, 5u, 8u}) {
    for (std::size_t key = 0; key < 2; ++key) {
      RawVerbsPeer raw(f.address());
      const auto keys = raw.grant_begin(grant.metadata(), 1, OperationKind::Write, 2);
      ASSERT_TRUE(keys.accepted) << keys.text;
      EXPECT_NE(raw.access(false, bytes, f.block_address(block), keys.rkeys[key]), IBV_WC_SUCCESS)
          << "block " << block << " key " << key;
      EXPECT_TRUE(f.untouched(block)) << "block " << block << " was written by the NIC";
    }
  }
}

TEST_F(RequestGrantOnTheNic, ARawPeerWritesItsBlocksAndTheDeviceRefusesTheRest) {
  refuses_the_rest("connection_pd", bytes_);
}

TEST_F(RequestGrantOnTheNic, TypeTwoWindowsBoundOverARunRefuseTheRest) {
  if (std::getenv("MEMWIRE_RXE_DEVICE") != nullptr)
    GTEST_SKIP() << "rxe checks a type-2 window's accesses against its MR, not the window's "
                    "bounds (rxe_resp.c check_rkey, Linux 6.1): run on hardware";
  refuses_the_rest("windows", bytes_);
}

TEST_F(RequestGrantOnTheNic, TheDeviceRefusesAWriteAfterRelease) {
  Fixture f(16);
  auto grant = f.pool->grant("raw-test-peer", "req-2", {5}, Access::Write, 60s);
  RawVerbsPeer raw(f.address());
  const auto keys = raw.grant_begin(grant.metadata(), 1, OperationKind::Write, 1);
  ASSERT_TRUE(keys.accepted) << keys.text;
  grant.close("decode aborted");
  EXPECT_NE(raw.access(false, bytes_, f.block_address(5), keys.rkeys[0]), IBV_WC_SUCCESS);
  EXPECT_TRUE(f.untouched(5)) << "a late write landed after release";
  // A new Begin under the released grant is refused by the owner, with the request named.
  RawVerbsPeer again(f.address());
  const auto refused = again.grant_begin(grant.metadata(), 1, OperationKind::Write, 1);
  EXPECT_FALSE(refused.accepted);
  EXPECT_NE(refused.text.find("blocks released by the owner for request req-2"), std::string::npos)
      << refused.text;
}

TEST_F(RequestGrantOnTheNic, TheDeviceRefusesAWriteAfterTheLease) {
  Fixture f(16);
  auto grant = f.pool->grant("raw-test-peer", "req-3", {6}, Access::Write, 1500ms);
  RawVerbsPeer raw(f.address());
  const auto keys = raw.grant_begin(grant.metadata(), 1, OperationKind::Write, 1);
  ASSERT_TRUE(keys.accepted) << keys.text;
  std::this_thread::sleep_until(grant.expires_at() + 1s);
  EXPECT_NE(raw.access(false, bytes_, f.block_address(6), keys.rkeys[0]), IBV_WC_SUCCESS);
  EXPECT_TRUE(f.untouched(6)) << "a write landed after the lease";
}

TEST_F(RequestGrantOnTheNic, AWriteGrantAllowsNoRead) {
  Fixture f(16);
  auto grant = f.pool->grant("raw-test-peer", "req-4", {1}, Access::Write, 60s);
  RawVerbsPeer raw(f.address());
  const auto keys = raw.grant_begin(grant.metadata(), 1, OperationKind::Write, 1);
  ASSERT_TRUE(keys.accepted) << keys.text;
  std::vector<std::byte> into(kBlock);
  EXPECT_NE(raw.access(true, into, f.block_address(1), keys.rkeys[0]), IBV_WC_SUCCESS);
}

// The cost of a request grant's binds: PoolBegin to Accept (windows allocated, bound on the QP,
// keys sent) for one run of n blocks and for n scattered blocks (n windows).
TEST_F(RequestGrantOnTheNic, BindCostPerBlockAndPerRequest) {
  Fixture f(4096);
  for (std::size_t n : {16u, 256u, 2048u}) {
    for (bool scattered : {false, true}) {
      std::vector<std::uint64_t> blocks;
      for (std::size_t i = 0; i < n; ++i) blocks.push_back(scattered ? 2 * i : i);
      auto grant = f.pool->grant("raw-test-peer", "cost", blocks, Access::Write, 600s);
      const auto windows = f.windows(grant);
      RawVerbsPeer raw(f.address());
      const auto started = std::chrono::steady_clock::now();
      const auto keys = raw.grant_begin(grant.metadata(), 1, OperationKind::Write, windows, 300s);
      const auto took =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started);
      ASSERT_TRUE(keys.accepted) << keys.text;
      const auto released_at = std::chrono::steady_clock::now();
      grant.close();
      const auto release =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - released_at);
      std::printf(
          "bind-cost blocks=%zu layout=%s windows=%zu grant_us=%.0f per_block_us=%.1f "
          "release_us=%.0f\n",
          n, scattered ? "scattered" : "one-run", windows, took.count(), took.count() / n,
          release.count());
    }
  }
}

}  // namespace
