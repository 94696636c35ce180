// The reader's side of the verbs protocol (VerbsActiveSide) driven through its port, with no
// RDMA device: the transfers it refuses before opening any connection. Moving bytes needs a
// device: the conformance suite runs that on rxe.
#include "transport/verbs/verbs_active_side.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "core/active_transfer.hpp"
#include "memwire/connector.hpp"
#include "memwire/descriptor.hpp"
#include "verbs_recording_port.hpp"

namespace memwire::detail::verbs {
namespace {

using namespace std::chrono_literals;

class VerbsActiveSideTest : public ::testing::Test {
 protected:
  VerbsActiveSideTest() {
    ConnectorOptions options;
    options.transports = {"tcp"};
    owner_ = std::make_unique<Connector>(options);
    readable_ = std::make_unique<ReadableOperation>(
        owner_->create_readable({Descriptor(std::span(remote_memory_))}));
  }
  // A read of the readable into `local`, begun on the side as transfer 1 towards `offer`.
  std::shared_ptr<ActiveTransfer> begin(std::vector<Descriptor> local,
                                        TransportOffer offer = {"verbs", "10.0.0.1:7471", {}, {}}) {
    auto transfer = std::make_shared<ActiveTransfer>(OperationKind::Read, std::move(local),
                                                     readable_->metadata(), 1s);
    side_.begin(transfer, offer, 1);
    return transfer;
  }
  void expect_failed_untouched(const ActiveTransfer& transfer, ErrorCode code) {
    EXPECT_EQ(transfer.status(), OperationStatus::Errored);
    ASSERT_TRUE(transfer.failure().has_value());
    EXPECT_EQ(transfer.failure()->code(), code) << transfer.failure()->what();
    EXPECT_TRUE(port_.sent.empty()) << "a notice left for a transfer refused here";
  }

  std::vector<std::byte> remote_memory_ = std::vector<std::byte>(8192);
  std::unique_ptr<Connector> owner_;
  std::unique_ptr<ReadableOperation> readable_;
  test_support::RecordingPort port_;
  VerbsActiveSide side_{port_, 4096, nullptr};
};

TEST_F(VerbsActiveSideTest, MoreLocalDescriptorsThanRemoteOnesFailBeforeAnyConnection) {
  std::vector<std::byte> local(8192);
  auto transfer = begin({Descriptor(local.data(), 4096), Descriptor(local.data() + 4096, 4096)});
  expect_failed_untouched(*transfer, ErrorCode::InvalidMetadata);
}

TEST_F(VerbsActiveSideTest, ADescriptorOfAnotherSizeFailsBeforeAnyConnection) {
  std::vector<std::byte> local(4096);
  auto transfer = begin({Descriptor(std::span(local))});
  expect_failed_untouched(*transfer, ErrorCode::SizeMismatch);
}

TEST_F(VerbsActiveSideTest, AnOfferThatNamesNoAddressFailsBeforeAnyConnection) {
  std::vector<std::byte> local(8192);
  auto transfer = begin({Descriptor(std::span(local))}, {"verbs", "nowhere", {}, {}});
  expect_failed_untouched(*transfer, ErrorCode::InvalidMetadata);
}

TEST_F(VerbsActiveSideTest, AnOfferWithRemoteKeysOfTheOldProtocolIsRefused) {
  std::vector<std::byte> local(8192);
  auto transfer = begin({Descriptor(std::span(local))}, {"verbs", "10.0.0.1:7471", {7}, {}});
  expect_failed_untouched(*transfer, ErrorCode::InvalidMetadata);
}

}  // namespace
}  // namespace memwire::detail::verbs
