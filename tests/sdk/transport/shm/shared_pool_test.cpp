// Pools (and one-shot operations of many descriptors) whose owner's memory is a SharedBuffer,
// over shm: the peer copies their blocks through its own mapping of the owner's buffer, after
// the owner checked the request. The mapping holds the run of the pool's blocks and nothing
// else; a pool that would show more (gaps, a run not on page boundaries) is copied by the owner
// as before, and so is a transfer whose bytes the owner must know are in (a request grant's,
// a tagged write's).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"
#include "support/random_pairs.hpp"
#include "support/shared_mappings.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::test_support::fill_pattern;
using memwire::test_support::first_mismatch;
using memwire::test_support::shared_mappings;

namespace {

constexpr std::size_t kBlock = 16384;
constexpr std::size_t kBlocks = 256;  // 4 MiB

ConnectorOptions shm_options() {
  ConnectorOptions options;
  options.transports = {"shm"};
  options.tcp.connections_per_peer = 1;  // one connection, one mapping cache
  return options;
}

// Sizes of this process's mappings of SharedBuffer files (its own buffers and those it maps).
std::vector<std::size_t> shared_mapping_sizes() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::size_t> sizes;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:memwire-shared") == std::string::npos) continue;
    std::istringstream range(line.substr(0, line.find(' ')));
    std::size_t begin = 0, end = 0;
    char dash = 0;
    range >> std::hex >> begin >> dash >> end;
    sizes.push_back(end - begin);
  }
  return sizes;
}

std::span<std::byte> block_of(std::byte* base, std::uint64_t index, std::size_t stride = kBlock) {
  return {base + index * stride, kBlock};
}

// 64 random distinct pairs (1 MiB: above the size that moves through memory).
std::vector<BlockPair> random_pairs(std::uint64_t seed) {
  return memwire::test_support::random_pairs(kBlocks, 64, seed);
}

struct SharedBufferPools : ::testing::Test {
  Connector owner{shm_options()};
  Connector peer{shm_options()};
  std::vector<std::byte> here = std::vector<std::byte>(kBlocks * kBlock);
  Pool local = peer.register_pool({{here.data(), kBlock, 0, kBlocks, {}}});

  // Reads `pairs` from `remote` and checks each landed block (and that the others did not
  // change); returns how many mappings of shared files this process gained.
  int read_and_check(const PoolMetadata& remote, std::byte* there, std::size_t stride,
                     const std::vector<BlockPair>& pairs) {
    for (std::uint64_t b = 0; b < kBlocks; ++b) fill_pattern(block_of(there, b, stride), 1000 + b);
    std::fill(here.begin(), here.end(), std::byte{0x5a});
    const int before = shared_mappings();
    auto read = peer.read_blocks(remote, pairs, local);
    EXPECT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
    std::vector<bool> landed(kBlocks);
    for (const auto& pair : pairs) {
      landed[pair.local] = true;
      EXPECT_EQ(first_mismatch(block_of(here.data(), pair.local), 1000 + pair.remote), kBlock)
          << "block " << pair.remote << " -> " << pair.local;
    }
    for (std::uint64_t b = 0; b < kBlocks; ++b) {
      if (!landed[b]) {
        EXPECT_EQ(block_of(here.data(), b)[kBlock - 1], std::byte{0x5a}) << "block " << b;
      }
    }
    return shared_mappings() - before;
  }
};

}  // namespace

TEST_F(SharedBufferPools, ScatteredBlocksAreReadAndWrittenThroughThePeersMapping) {
  SharedBuffer there(kBlocks * kBlock);
  auto remote = owner.register_pool({{there.data(), kBlock, 0, kBlocks, {}}});
  EXPECT_EQ(read_and_check(remote.metadata(), there.data(), kBlock, random_pairs(1)), 1)
      << "the peer did not map the owner's pool";
  // An untagged write: through a writable mapping of the same run.
  const auto pairs = random_pairs(2);
  for (const auto& pair : pairs) fill_pattern(block_of(here.data(), pair.local), 2000 + pair.local);
  std::fill(there.bytes().begin(), there.bytes().end(), std::byte{0x5a});
  const int before = shared_mappings();
  auto write = peer.write_blocks(local, pairs, remote.metadata());
  ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(shared_mappings() - before, 1);
  std::vector<bool> written(kBlocks);
  for (const auto& pair : pairs) {
    written[pair.remote] = true;
    EXPECT_EQ(first_mismatch(block_of(there.data(), pair.remote), 2000 + pair.local), kBlock);
  }
  for (std::uint64_t b = 0; b < kBlocks; ++b) {
    if (!written[b]) {
      EXPECT_EQ(block_of(there.data(), b)[0], std::byte{0x5a}) << "block " << b;
    }
  }
  // Mapped once: the next transfers reuse the mappings.
  EXPECT_EQ(read_and_check(remote.metadata(), there.data(), kBlock, random_pairs(3)), 0);
}

TEST_F(SharedBufferPools, ThePeerMapsThePoolsBlocksAndNothingElseOfTheBuffer) {
  // The pool takes the buffer's first half: the second half is no block's.
  SharedBuffer there(2 * kBlocks * kBlock);
  auto remote = owner.register_pool({{there.data(), kBlock, 0, kBlocks, {}}});
  const auto before = shared_mapping_sizes();
  ASSERT_EQ(read_and_check(remote.metadata(), there.data(), kBlock, random_pairs(4)), 1);
  auto after = shared_mapping_sizes();
  for (auto size : before) after.erase(std::find(after.begin(), after.end(), size));
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after.front(), kBlocks * kBlock) << "the mapping shows more than the pool's blocks";
}

TEST_F(SharedBufferPools, APoolThatAMappingWouldShowMoreOfIsCopiedByItsOwner) {
  // Blocks with gaps between them (every other block of the buffer).
  SharedBuffer strided(2 * kBlocks * kBlock);
  auto with_gaps = owner.register_pool({{strided.data(), kBlock, 2 * kBlock, kBlocks, {}}});
  EXPECT_EQ(read_and_check(with_gaps.metadata(), strided.data(), 2 * kBlock, random_pairs(5)), 0);
  // Blocks back to back, but not starting on a page: the first page holds bytes of no block.
  SharedBuffer offset(kBlocks * kBlock + 4096);
  auto off_page =
      owner.register_pool({{offset.data() + 512, kBlock, 0, kBlocks, {}}}, PoolOptions{});
  EXPECT_EQ(read_and_check(off_page.metadata(), offset.data() + 512, kBlock, random_pairs(6)), 0);
}

TEST_F(SharedBufferPools, TransfersWhoseBytesTheOwnerMustSeeLandAreCopiedByIt) {
  SharedBuffer there(kBlocks * kBlock);
  auto remote = owner.register_pool({{there.data(), kBlock, 0, kBlocks, {}}});
  const auto pairs = random_pairs(7);
  // A tagged write: its tag is delivered once its bytes are in, which only the owner's copy
  // tells.
  for (const auto& pair : pairs) fill_pattern(block_of(here.data(), pair.local), 3000 + pair.local);
  int before = shared_mappings();
  auto write = peer.write_blocks(local, pairs, remote.metadata(), "layer-0");
  ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(remote.wait_for_tag("layer-0", 10s).tag, "layer-0");
  EXPECT_EQ(shared_mappings(), before);
  for (const auto& pair : pairs)
    EXPECT_EQ(first_mismatch(block_of(there.data(), pair.remote), 3000 + pair.local), kBlock);
  // A request grant's read: its release waits for the bytes the owner is moving.
  std::vector<std::uint64_t> granted;
  for (const auto& pair : pairs) granted.push_back(pair.remote);
  auto grant = remote.grant("decode", "request-1", granted, Access::Read, 30s);
  EXPECT_EQ(read_and_check(grant.metadata(), there.data(), kBlock, pairs), 0);
  // A tagged read is mapped: its tag goes once the peer has the bytes.
  before = shared_mappings();
  auto read = peer.read_blocks(remote.metadata(), random_pairs(8), local, "read-0");
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(remote.wait_for_tag("read-0", 10s, {}, TagKinds::Reads).tag, "read-0");
  EXPECT_EQ(shared_mappings() - before, 1);
}

TEST(SharedBufferOneShot, ManyDescriptorsOfASharedBufferAreCopiedThroughOneMapping) {
  Connector owner{shm_options()}, peer{shm_options()};
  constexpr std::size_t kDescriptors = 16, kSize = 128 << 10;
  SharedBuffer source(2 * kDescriptors * kSize);
  fill_pattern(source.bytes(), 9);
  std::vector<Descriptor> scattered;  // every other 128 KiB of the buffer
  for (std::size_t d = 0; d < kDescriptors; ++d)
    scattered.emplace_back(source.data() + 2 * d * kSize, kSize);
  std::vector<std::byte> target(kDescriptors * kSize);
  std::vector<Descriptor> into;
  for (std::size_t d = 0; d < kDescriptors; ++d)
    into.emplace_back(target.data() + d * kSize, kSize);
  const int before = shared_mappings();
  auto readable = owner.create_readable(scattered);
  auto read = peer.begin_read(readable.metadata(), into);
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(shared_mappings() - before, 1);
  for (std::size_t d = 0; d < kDescriptors; ++d)
    for (std::size_t i = 0; i < kSize; i += 4096)
      ASSERT_EQ(target[d * kSize + i], source.data()[2 * d * kSize + i]) << "descriptor " << d;
  // And written back, through a writable mapping; the writable completes once they landed.
  std::vector<std::byte> update(target.size());
  fill_pattern(update, 10);
  std::vector<Descriptor> from;
  for (std::size_t d = 0; d < kDescriptors; ++d)
    from.emplace_back(update.data() + d * kSize, kSize);
  auto writable = owner.create_writable(scattered);
  auto write = peer.begin_write(from, writable.metadata());
  ASSERT_EQ(writable.wait_for_completion(10s), OperationStatus::Complete);
  ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  for (std::size_t d = 0; d < kDescriptors; ++d)
    EXPECT_EQ(std::memcmp(source.data() + 2 * d * kSize, update.data() + d * kSize, kSize), 0)
        << "descriptor " << d;
}
