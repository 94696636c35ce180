// claimed_registration (sdk/src/owner/transfer_claim.*): the owner's first answer to a transfer
// on every transport, with real Registrations, one of them a real pool.
#include "owner/transfer_claim.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/error.hpp"
#include "pool/pool_state.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

// Generation 0x1'0000'0007: the low 32 bits differ from the whole, as a stream's wire carries.
constexpr std::uint64_t kGeneration = 0x1'0000'0007;

class TransferClaimTest : public ::testing::Test {
 protected:
  TransferClaimTest() {
    operation_ = std::make_shared<Registration>(
        OperationKind::Read, std::vector<Descriptor>{Descriptor(memory_.data(), 256)}, 0, table_,
        1s);
    table_->insert(operation_);
    state_ = std::make_shared<PoolState>(
        PoolOptions{}, kGeneration,
        std::vector<BlockRegion>{{memory_.data() + 256, 64, 64, 4, {}}});
    pool_ = std::make_shared<Registration>(
        OperationKind::Write, std::vector<Descriptor>{Descriptor(memory_.data() + 256, 256)}, 0,
        table_, 1s);
    pool_->make_pool(state_, *state_);
    table_->insert(pool_);
  }

  // The code of the claim's refusal; nullopt when it was not refused.
  std::optional<ErrorCode> refusal(const TransferClaim& claim) {
    try {
      claimed_registration(*table_, claim);
    } catch (const Error& error) {
      return error.code();
    }
    return std::nullopt;
  }

  std::vector<std::byte> memory_ = std::vector<std::byte>(512);
  std::shared_ptr<RegistrationTable> table_ = std::make_shared<RegistrationTable>();
  std::shared_ptr<Registration> operation_;
  std::shared_ptr<PoolState> state_;
  std::shared_ptr<Registration> pool_;
};

TEST_F(TransferClaimTest, FindsWhatItClaims) {
  EXPECT_EQ(claimed_registration(*table_, {operation_->key(), false, 0}), operation_);
  EXPECT_EQ(claimed_registration(*table_, {pool_->key(), true, kGeneration}), pool_);
  // A stream's wire carries the generation's low 32 bits.
  EXPECT_EQ(claimed_registration(*table_, {pool_->key(), true, kGeneration & 0xffffffff, 32}),
            pool_);
}

TEST_F(TransferClaimTest, AnUnknownKeyIsExpiredForAPoolAndNotFoundForAnOperation) {
  EXPECT_EQ(refusal({random_id(), true, kGeneration}), ErrorCode::Expired);
  EXPECT_EQ(refusal({random_id(), false, 0}), ErrorCode::NotFound);
}

TEST_F(TransferClaimTest, APoolIsNeverAnOperationNorTheOtherWayRound) {
  EXPECT_EQ(refusal({pool_->key(), false, 0}), ErrorCode::AccessDenied);
  EXPECT_EQ(refusal({operation_->key(), true, 0}), ErrorCode::AccessDenied);
}

TEST_F(TransferClaimTest, AnotherGenerationIsExpired) {
  EXPECT_EQ(refusal({pool_->key(), true, kGeneration + 1}), ErrorCode::Expired);
  // The whole generation where the wire carries all of it: its low bits alone are another.
  EXPECT_EQ(refusal({pool_->key(), true, kGeneration & 0xffffffff}), ErrorCode::Expired);
  EXPECT_EQ(refusal({pool_->key(), true, (kGeneration + 1) & 0xffffffff, 32}), ErrorCode::Expired);
}

}  // namespace
