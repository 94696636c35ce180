// Renewing a request grant's lease (BlockGrant::renew, a peer's heartbeat as the owner applies
// it) over every transport: a renewed lease admits writes past its first end (verbs: the NIC's
// timer follows the new end), never past the bound the owner set at the grant, and a lease
// that ended stays ended. The bytes are checked.
#include <cstring>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/error_code_of.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = FilledBlocks::kBlock;

class GrantRenewal : public PoolTransportConformance {
 protected:
  void SetUp() override {
    PoolTransportConformance::SetUp();
    if (IsSkipped()) return;
    owner_.emplace(options_named("prefill"));
    peer_.emplace(options_named("decode"));
    pool_.emplace(owner_->register_pool(there_.regions()));
    local_.emplace(peer_->register_pool(here_.regions()));
  }
  // Writes local block 0 ('p') into remote `block` under `metadata`; its error code, if any.
  std::optional<ErrorCode> write(const PoolMetadata& metadata, std::uint64_t block) {
    auto transfer = peer_->write_blocks(*local_, {{block, 0}}, metadata);
    try {
      transfer.wait_for_completion(20s);
      return std::nullopt;
    } catch (const Error& error) {
      return error.code();
    }
  }
  FilledBlocks there_{8, 0}, here_{8, 'p'};
  std::optional<Connector> owner_, peer_;
  std::optional<Pool> pool_, local_;
};

TEST_P(GrantRenewal, ARenewedLeaseAdmitsWritesPastItsFirstEnd) {
  auto grant = pool_->grant("decode", "req-1", {2}, Access::Write, 600ms, 30s);
  const auto first_end = grant.expires_at();
  EXPECT_EQ(write(grant.metadata(), 2), std::nullopt);  // the peer holds the keys now
  std::memset(there_.block(2).data(), 0, kBlock);
  const auto renewed_end = grant.renew(5s);
  EXPECT_GT(renewed_end, first_end + 3s);
  EXPECT_EQ(grant.expires_at(), renewed_end);
  std::this_thread::sleep_until(first_end + 400ms);
  EXPECT_FALSE(grant.expired());
  EXPECT_EQ(write(grant.metadata(), 2), std::nullopt) << "refused after a renewal";
  EXPECT_TRUE(there_.block_is(2, 'p'));
}

TEST_P(GrantRenewal, RenewalsNeverPassTheOwnersBound) {
  auto grant = pool_->grant("decode", "req-2", {3}, Access::Write, 300ms, 700ms);
  EXPECT_EQ(write(grant.metadata(), 3), std::nullopt);
  std::memset(there_.block(3).data(), 0, kBlock);
  const auto limit = grant.renew_limit();
  EXPECT_EQ(grant.renew(30s), limit);  // asked for 30 s: got the bound
  std::this_thread::sleep_until(limit + 200ms);
  EXPECT_EQ(error_code_of([&] { (void)grant.renew(30s); }), ErrorCode::Expired);
  EXPECT_NE(write(grant.metadata(), 3), std::nullopt);  // Expired (verbs: the NIC refuses)
  EXPECT_TRUE(there_.block_is(3, 0)) << "a write landed past the owner's bound";
  EXPECT_TRUE(grant.expired());
}

TEST_P(GrantRenewal, ALeaseThatEndedIsNotRevived) {
  auto grant = pool_->grant("decode", "req-3", {4}, Access::Write, 200ms, 30s);
  EXPECT_EQ(write(grant.metadata(), 4), std::nullopt);
  std::memset(there_.block(4).data(), 0, kBlock);
  std::this_thread::sleep_for(400ms);
  // Not yet fenced by expired(): the heartbeat still comes too late.
  EXPECT_EQ(error_code_of([&] { (void)grant.renew(10s); }), ErrorCode::Expired);
  EXPECT_NE(write(grant.metadata(), 4), std::nullopt);
  EXPECT_TRUE(there_.block_is(4, 0)) << "a write landed after the lease";
  EXPECT_TRUE(grant.expired());
}

TEST_P(GrantRenewal, AClosedGrantOrABadRenewalIsRefused) {
  auto grant = pool_->grant("decode", "req-4", {5}, Access::Write, 10s, 30s);
  EXPECT_EQ(error_code_of([&] { (void)grant.renew(0ms); }), ErrorCode::InvalidArgument);
  grant.close("decode is done");
  EXPECT_EQ(error_code_of([&] { (void)grant.renew(10s); }), ErrorCode::Cancelled);
  EXPECT_EQ(error_code_of([&] { (void)pool_->grant("decode", "r", {0}, Access::Write, 2s, 1s); }),
            ErrorCode::InvalidArgument);
  // No max_lease: renewals never carry the lease past its first end.
  auto fixed = pool_->grant("decode", "req-5", {6}, Access::Write, 5s);
  EXPECT_EQ(fixed.renew_limit(), fixed.expires_at());
  EXPECT_EQ(fixed.renew(60s), fixed.renew_limit());
}

MEMWIRE_CONFORMANCE_SUITE(GrantRenewal);

}  // namespace
