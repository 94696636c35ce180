// Request-scoped block grants (leases, issue 32 item 2) over every transport: a peer moves the
// blocks granted for its request and nothing else; after close() or after the lease nothing
// lands (the bytes are checked), and the error names the request. Verbs enforces it on the NIC
// (request_grant_nic_test.cpp shows a raw peer refused by the device itself).
#include <cstring>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/error_code_of.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = FilledBlocks::kBlock;
constexpr std::size_t kBlocks = 16;

struct Blocks : FilledBlocks {
  explicit Blocks(char fill = 0) : FilledBlocks(kBlocks, fill) {}
};

void wait_ok(Operation& operation, std::chrono::milliseconds timeout) {
  ASSERT_EQ(operation.wait_for_completion(timeout), OperationStatus::Complete);
}

class RequestGrants : public PoolTransportConformance {
 protected:
  void SetUp() override {
    PoolTransportConformance::SetUp();
    if (IsSkipped()) return;
    owner_.emplace(options_named("decode"));
    peer_.emplace(options_named("prefill"));
    pool_.emplace(owner_->register_pool(there_.regions()));
    local_.emplace(peer_->register_pool(here_.regions()));
  }
  // Writes local block 0 ('p') into remote `block` under `metadata`.
  void write(const PoolMetadata& metadata, std::uint64_t block, const std::string& tag = "") {
    auto transfer = peer_->write_blocks(*local_, {{block, 0}}, metadata, tag);
    wait_ok(transfer, 20s);
  }
  Blocks there_{0}, here_{'p'};
  std::optional<Connector> owner_, peer_;
  std::optional<Pool> pool_, local_;
};

TEST_P(RequestGrants, AWriteInsideTheGrantLandsAndItsTagNamesPeerAndRequest) {
  auto grant = pool_->grant("prefill", "req-1", {2, 3, 7}, Access::Write, 30s);
  ASSERT_NE(grant.metadata().scope(), nullptr);
  EXPECT_EQ(grant.metadata().scope()->runs, (std::vector<BlockRun>{{2, 2}, {7, 1}}));
  // What a peer receives survives JSON.
  const auto metadata = PoolMetadata::from_json(grant.metadata().to_json());
  write(metadata, 3, "req-1/0");
  const auto notification = pool_->wait_for_tag("req-1/0", 10s);
  EXPECT_EQ(notification.peer, "prefill");
  EXPECT_TRUE(notification.authenticated);
  EXPECT_EQ(notification.request, "req-1");
  EXPECT_TRUE(there_.block_is(3, 'p'));
  EXPECT_TRUE(there_.block_is(4, 0));
}

TEST_P(RequestGrants, AWriteOutsideTheGrantedBlocksIsRefusedWithNothingLanded) {
  auto grant = pool_->grant("prefill", "req-1", {2, 3, 7}, Access::Write, 30s);
  for (std::uint64_t block : {0u, 4u, 6u, 8u, 15u}) {
    auto transfer = peer_->write_blocks(*local_, {{block, 0}}, grant.metadata(), "t");
    EXPECT_EQ(error_code_of([&] { transfer.wait_for_completion(20s); }), ErrorCode::AccessDenied)
        << "block " << block;
    EXPECT_TRUE(there_.block_is(block, 0)) << "block " << block;
  }
  // A run that starts inside the grant and leaves it is refused whole.
  auto straddling = peer_->write_blocks(*local_, {{3, 0}, {4, 1}}, grant.metadata());
  EXPECT_EQ(error_code_of([&] { straddling.wait_for_completion(20s); }), ErrorCode::AccessDenied);
  EXPECT_TRUE(there_.block_is(3, 0));
  EXPECT_TRUE(there_.block_is(4, 0));
}

TEST_P(RequestGrants, ALateWriteAfterCloseIsRefusedWithNothingLanded) {
  auto grant = pool_->grant("prefill", "req-9", {5}, Access::Write, 30s);
  const auto metadata = grant.metadata();
  write(metadata, 5);  // the peer holds the keys now (verbs: windows bound on its QP)
  std::memset(there_.block(5).data(), 0, kBlock);
  grant.close("decode aborted it");
  EXPECT_TRUE(grant.closed());
  grant.close();  // idempotent: the first reason stays
  auto late = peer_->write_blocks(*local_, {{5, 0}}, metadata, "req-9/1");
  const auto why = message_of([&] { late.wait_for_completion(20s); });
  EXPECT_NE(why.find("blocks released by the owner for request req-9: decode aborted it"),
            std::string::npos)
      << why;
  EXPECT_TRUE(there_.block_is(5, 0)) << "a late write landed after release";
  EXPECT_EQ(error_code_of([&] { pool_->wait_for_tag("req-9/1", 300ms); }), ErrorCode::Timeout);
}

TEST_P(RequestGrants, AWriteAfterTheLeaseIsRefusedWithNothingLanded) {
  auto grant = pool_->grant("prefill", "req-2", {1}, Access::Write, 300ms);
  write(grant.metadata(), 1);
  std::memset(there_.block(1).data(), 0, kBlock);
  std::this_thread::sleep_for(600ms);
  auto late = peer_->write_blocks(*local_, {{1, 0}}, grant.metadata());
  const auto why = message_of([&] { late.wait_for_completion(20s); });
  EXPECT_NE(why.find("lease"), std::string::npos) << why;
  EXPECT_TRUE(there_.block_is(1, 0)) << "a write landed after the lease";
}

TEST_P(RequestGrants, AReadGrantAllowsNoWrite) {
  auto grant = pool_->grant("prefill", "req-3", {0}, Access::Read, 30s);
  auto refused = peer_->write_blocks(*local_, {{0, 0}}, grant.metadata());
  EXPECT_EQ(error_code_of([&] { refused.wait_for_completion(20s); }), ErrorCode::AccessDenied);
  EXPECT_TRUE(there_.block_is(0, 0));
  std::memset(there_.block(0).data(), 'd', kBlock);
  auto read = peer_->read_blocks(grant.metadata(), {{0, 1}}, *local_);
  wait_ok(read, 20s);
  EXPECT_TRUE(here_.block_is(1, 'd'));
}

TEST_P(RequestGrants, ThePeerChecksTheGrantBeforeSending) {
  auto grant = pool_->grant("prefill", "req-6", {2, 3}, Access::Write, 30s);
  auto outside = peer_->write_blocks(*local_, {{4, 0}}, grant.metadata());
  auto reading = peer_->read_blocks(grant.metadata(), {{2, 0}}, *local_);
  for (auto* refused : {&outside, &reading}) {
    const auto failure = error_of([&] { refused->wait_for_completion(20s); });
    EXPECT_EQ(failure.code(), ErrorCode::AccessDenied) << failure.what();
    const std::string why = failure.what();
    EXPECT_NE(why.find("request req-6"), std::string::npos) << why;
    EXPECT_NE(why.find("(refused before any byte moved)"), std::string::npos) << why;
  }
  // Nothing reached the owner: no refusal there, no fault, no byte.
  EXPECT_EQ(pool_->refusals(), 0u);
  EXPECT_EQ(pool_->peer_faults(), 0u);
  EXPECT_TRUE(there_.block_is(4, 0));
  EXPECT_TRUE(here_.block_is(0, 'p'));
}

TEST_P(RequestGrants, DroppingTheHandleReleasesTheBlocks) {
  std::optional<PoolMetadata> metadata;
  {
    auto grant = pool_->grant("prefill", "req-4", {9}, Access::Write, 30s);
    metadata = grant.metadata();
  }
  auto late = peer_->write_blocks(*local_, {{9, 0}}, *metadata);
  EXPECT_EQ(error_code_of([&] { late.wait_for_completion(20s); }), ErrorCode::Cancelled);
  EXPECT_TRUE(there_.block_is(9, 0));
}

TEST_P(RequestGrants, LiveGrantsPerPoolAreCapped) {
  PoolOptions options;
  options.max_request_grants = 2;
  Blocks memory;
  auto pool = owner_->register_pool(memory.regions(), options);
  auto first = pool.grant("prefill", "a", {0}, Access::Write, 30s);
  auto second = pool.grant("prefill", "b", {1}, Access::Write, 30s);
  EXPECT_EQ(error_code_of([&] { (void)pool.grant("prefill", "c", {2}, Access::Write, 30s); }),
            ErrorCode::InvalidArgument);
  first.close();
  auto third = pool.grant("prefill", "c", {2}, Access::Write, 30s);
  EXPECT_FALSE(third.closed());
}

TEST_P(RequestGrants, BadGrantsAreRefused) {
  EXPECT_EQ(error_code_of([&] { (void)pool_->grant("prefill", "r", {}, Access::Write, 1s); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(
      error_code_of([&] { (void)pool_->grant("prefill", "r", {kBlocks}, Access::Write, 1s); }),
      ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)pool_->grant("prefill", "", {0}, Access::Write, 1s); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)pool_->grant("prefill", "r", {0}, Access::Write, 0ms); }),
            ErrorCode::InvalidArgument);
}

MEMWIRE_CONFORMANCE_SUITE(RequestGrants);

}  // namespace
