// Staged CUDA transfers across hosts overlap their copies with the wire (StagedChunks): the
// sender copies chunk by chunk and sends a range once its chunk is in, the receiver queues each
// answer to the device as it lands. Needs a GPU: elsewhere every test here skips and says why.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "cuda/cuda_staging.hpp"
#include "cuda/pinned_pool.hpp"
#include "memwire/memwire.hpp"
#include "support/cuda_memory.hpp"
#include "support/pattern.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::detail::CudaDriver;
using memwire::test_support::DeviceBytes;

namespace {

// Sizes that end neither on a chunk (2 MiB) nor on a request (1 MiB below) boundary.
const std::vector<std::size_t> kSizes = {(5u << 20) + 3, (7u << 20) + 1000, 4096, (1u << 20) - 1};

}  // namespace

// Every byte of a GPU -> GPU read over tcp, in many requests of 1 MiB across descriptors,
// arrives where it belongs: the owner's chunks, copied while earlier ones are sent, and the
// reader's, queued to the device as they land.
TEST(CudaOverlap, AStagedTcpReadOfManyChunksMovesEveryByte) {
  REQUIRE_CUDA();
  ConnectorOptions options;
  options.transports = {"tcp"};
  options.tcp.chunk_size = 1u << 20;
  Connector owner(options), reader(options);
  std::vector<std::unique_ptr<DeviceBytes>> from, into;
  std::vector<Descriptor> sources, targets;
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    from.push_back(std::make_unique<DeviceBytes>(*driver, kSizes[i]));
    into.push_back(std::make_unique<DeviceBytes>(*driver, kSizes[i]));
    from.back()->fill(100 + i);
    into.back()->fill(900 + i);  // not what arrives
    sources.push_back(from.back()->descriptor());
    targets.push_back(into.back()->descriptor());
  }
  for (int round = 0; round < 2; ++round) {  // the second reuses the pinned stand-ins
    auto readable = owner.create_readable(sources);
    auto read = reader.begin_read(readable.metadata(), targets);
    ASSERT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
    EXPECT_EQ(readable.wait_for_completion(60s), OperationStatus::Complete);
    EXPECT_EQ(read.transport(), "tcp");
    for (std::size_t i = 0; i < kSizes.size(); ++i)
      EXPECT_EQ(into[i]->first_mismatch(100 + i), kSizes[i]) << "descriptor " << i;
    for (auto& target : into) target->fill(7);
  }
}

// The staging alone: a sender's range waits for its own chunks, a receiver's landed ranges
// reach the device with no copy of everything at the end.
TEST(CudaOverlap, StagingFillsRangesAndQueuesLandedBytes) {
  REQUIRE_CUDA();
  auto pool = std::make_shared<detail::PinnedPool>(*driver, std::uint64_t{1} << 30);
  DeviceBytes a(*driver, kSizes[0]), b(*driver, kSizes[1]);
  a.fill(1);
  b.fill(2);
  {
    detail::CudaStaging staging({a.descriptor(), b.descriptor()}, pool);
    const auto& host = staging.host();
    // The last MiB of b first: every chunk before it is in too.
    auto* tail = static_cast<std::byte*>(host[1].ptr()) + host[1].size() - (1u << 20);
    staging.fill_host(tail, 1u << 20);
    for (std::size_t i = 0; i < 2; ++i)
      EXPECT_EQ(test_support::first_mismatch(
                    {static_cast<const std::byte*>(host[i].ptr()), host[i].size()}, i + 1),
                host[i].size());
  }
  DeviceBytes c(*driver, kSizes[0]), d(*driver, kSizes[1]);
  c.fill(5);
  d.fill(6);
  detail::CudaStaging staging({c.descriptor(), d.descriptor()}, pool);
  const auto& host = staging.host();
  for (std::size_t i = 0; i < 2; ++i) {
    std::span<std::byte> bytes(static_cast<std::byte*>(host[i].ptr()), host[i].size());
    test_support::fill_pattern(bytes, 30 + i);
    for (std::size_t at = 0; at < bytes.size(); at += 300000)  // lands in odd pieces
      staging.landed(bytes.data() + at, std::min<std::size_t>(300000, bytes.size() - at));
  }
  staging.copy_to_device();
  EXPECT_EQ(c.first_mismatch(30), kSizes[0]);
  EXPECT_EQ(d.first_mismatch(31), kSizes[1]);
}
