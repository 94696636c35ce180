// end_admitted_transfer (sdk/src/owner/transfer_end.*): how every transport ends a tagged pool
// transfer its owner admitted, against a real PoolState and its queue of tags.
#include "owner/transfer_end.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

class TransferEndTest : public ::testing::Test {
 protected:
  std::vector<std::byte> memory_ = std::vector<std::byte>(256);
  PoolState pool_{PoolOptions{}, 1, {{memory_.data(), 64, 64, 4, {}}}};
  const PoolState::Peer peer_{"decode", true, "", "", 0};
  const PoolState::TagFilter writes_{"decode", "", TagKinds::Writes};
};

TEST_F(TransferEndTest, WithoutAFailureItsTagIsDeliveredOnce) {
  EXPECT_EQ(
      end_admitted_transfer(pool_, peer_, "layer-0", OperationKind::Write, nullptr, std::nullopt),
      std::nullopt);
  const auto tag = pool_.try_wait_for_tag("layer-0", writes_);
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->peer, "decode");
  EXPECT_FALSE(pool_.try_wait_for_tag("layer-0", writes_)) << "delivered twice";
}

TEST_F(TransferEndTest, AFailureEndsTheWaitsForItsTag) {
  const auto refused =
      end_admitted_transfer(pool_, peer_, "layer-1", OperationKind::Write, nullptr,
                            Error(ErrorCode::Transport, "a request of this transfer failed"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code(), ErrorCode::Transport);
  try {
    pool_.wait_for_tag("layer-1", 1s, writes_);
    ADD_FAILURE() << "the wait for a failed transfer's tag did not end with its failure";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::PeerLost) << error.what();
  }
}

TEST_F(TransferEndTest, ADeliveryThatFailsIsTheAnswer) {
  pool_.close(0ms, "owner done");
  const auto refused =
      end_admitted_transfer(pool_, peer_, "layer-2", OperationKind::Write, nullptr, std::nullopt);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code(), ErrorCode::Cancelled);
}

TEST_F(TransferEndTest, AnUntaggedTransferDeliversNothing) {
  EXPECT_EQ(end_admitted_transfer(pool_, peer_, "", OperationKind::Write, nullptr, std::nullopt),
            std::nullopt);
  EXPECT_EQ(pool_.queued(), 0u);
}

}  // namespace
