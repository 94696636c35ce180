// ShmOptions::direct_reads: an owner that opts in is read by a peer of its own user without a
// request (process_vm_readv on the reader's thread), so a READ completes while every thread
// of the owner is stopped; without the opt-in, and for what the owner must admit itself (a
// tagged READ, a READ under a request grant), the owner still serves each READ.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"
#include "support/test_peer_process.hpp"
#include "util/test_hooks.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = 4096;
constexpr std::size_t kBlocks = 16;
constexpr std::uint64_t kSeed = 43;

// READs this process made directly from a peer's memory so far (the path taken, counted).
std::uint64_t direct_reads() { return detail::test_hooks::direct_reads.load(); }

ConnectorOptions shm_only(bool direct_reads = false) {
  ConnectorOptions options;
  options.transports = {"shm"};
  options.shm.direct_reads = direct_reads;
  return options;
}

// An owner process with a pool of kBlocks blocks of the pattern of kSeed, opted in or not.
struct PoolOwner {
  explicit PoolOwner(bool direct_reads)
      : child(start_test_peer(
            {"publish", "pool", std::to_string(kBlock * kBlocks), std::to_string(kSeed)},
            {"MEMWIRE_TRANSPORTS=shm",
             std::string("MEMWIRE_SHM_DIRECT_READS=") + (direct_reads ? "1" : "0")})),
        metadata(PoolMetadata::from_json(expect_line(child))) {}
  ~PoolOwner() {
    child.kill(SIGCONT);
    child.write_line("quit");
    child.wait(10s);
  }
  ChildProcess child;
  PoolMetadata metadata;
};

// A reader's pool and connector, and what a read of remote blocks `blocks` into its first
// blocks ends as within `timeout` (the bytes checked against the owner's pattern when it
// completed).
struct Reader {
  Connector connector{shm_only()};
  std::vector<std::byte> memory = std::vector<std::byte>(kBlock * kBlocks);
  Pool pool = connector.register_pool({{memory.data(), kBlock, 0, kBlocks, {}}});

  OperationStatus read(const PoolMetadata& remote, const std::vector<std::uint64_t>& blocks,
                       std::chrono::milliseconds timeout, std::string tag = "") {
    std::memset(memory.data(), 0, memory.size());
    std::vector<BlockPair> pairs;
    for (std::size_t i = 0; i < blocks.size(); ++i) pairs.push_back({blocks[i], i});
    auto transfer = connector.read_blocks(remote, pairs, pool, std::move(tag));
    try {
      transfer.wait_for_completion(timeout);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::Timeout) throw;
      stalled = std::move(transfer);  // finishes once the owner runs again
      return OperationStatus::InProgress;
    }
    const auto status = transfer.status();
    for (std::size_t i = 0; i < blocks.size(); ++i)
      for (std::size_t byte = 0; byte < kBlock; byte += 512)
        EXPECT_EQ(memory[i * kBlock + byte], pattern_byte(kSeed, blocks[i] * kBlock + byte))
            << "block " << blocks[i] << " byte " << byte;
    return status;
  }
  std::optional<BlockTransfer> stalled;
};

// An owner that opted in, in this process, with a pool of the pattern of kSeed.
struct OwnerHere {
  Connector connector{shm_only(/*direct_reads=*/true)};
  std::vector<std::byte> memory = [] {
    std::vector<std::byte> bytes(kBlock * kBlocks);
    fill_pattern(bytes, kSeed);
    return bytes;
  }();
  Pool pool = connector.register_pool({{memory.data(), kBlock, 0, kBlocks, {}}});
};

TEST(DirectReads, AnOwnerThatOptsInIsReadWhileItIsStopped) {
  PoolOwner owner(/*direct_reads=*/true);
  Reader reader;
  ASSERT_EQ(reader.read(owner.metadata, {0, 1}, 10s), OperationStatus::Complete);
  owner.child.kill(SIGSTOP);  // no thread of the owner runs from now on
  const auto before = direct_reads();
  EXPECT_EQ(reader.read(owner.metadata, {9, 3, 15, 4}, 5s), OperationStatus::Complete);
  EXPECT_EQ(reader.read(owner.metadata, {7}, 5s), OperationStatus::Complete);
  EXPECT_EQ(direct_reads() - before, 2u) << "a READ of a stopped owner went another way";
}

TEST(DirectReads, WithoutTheOptInTheOwnerServesEachRead) {
  PoolOwner owner(/*direct_reads=*/false);
  Reader reader;
  const auto before = direct_reads();
  ASSERT_EQ(reader.read(owner.metadata, {0, 1}, 10s), OperationStatus::Complete);
  EXPECT_EQ(direct_reads(), before) << "read directly without the owner's opt-in";
  owner.child.kill(SIGSTOP);
  EXPECT_EQ(reader.read(owner.metadata, {9, 3}, 300ms), OperationStatus::InProgress);
  owner.child.kill(SIGCONT);
  ASSERT_TRUE(reader.stalled);
  EXPECT_EQ(reader.stalled->wait_for_completion(10s), OperationStatus::Complete);
}

TEST(DirectReads, ATaggedReadStillAsksTheOwner) {
  PoolOwner owner(/*direct_reads=*/true);
  Reader reader;
  ASSERT_EQ(reader.read(owner.metadata, {0}, 10s), OperationStatus::Complete);
  owner.child.kill(SIGSTOP);
  // Its tag is the owner's to deliver once it admitted the transfer: no stopped owner does.
  EXPECT_EQ(reader.read(owner.metadata, {5}, 300ms, "layer-0"), OperationStatus::InProgress);
  owner.child.kill(SIGCONT);
  ASSERT_TRUE(reader.stalled);
  EXPECT_EQ(reader.stalled->wait_for_completion(10s), OperationStatus::Complete);
}

TEST(DirectReads, AReadUnderAClosedGrantIsRefusedByTheOwner) {
  // In one process: the owner opted in, and its grant's end must still fence the peer.
  OwnerHere here;
  auto& pool = here.pool;
  Reader reader;
  auto grant = pool.grant("reader", "req-1", {2, 3}, Access::Read, 30s);
  const auto granted = grant.metadata();
  EXPECT_EQ(reader.read(granted, {2, 3}, 10s), OperationStatus::Complete);
  grant.close("request over");
  std::memset(reader.memory.data(), 0, reader.memory.size());
  std::vector<BlockPair> pairs{{2, 0}};
  auto late = reader.connector.read_blocks(granted, pairs, reader.pool);
  EXPECT_THROW(late.wait_for_completion(10s), Error);
  EXPECT_EQ(late.status(), OperationStatus::Errored);
  EXPECT_EQ(std::to_integer<int>(reader.memory[0]), 0) << "bytes came after the grant's close";
}

TEST(DirectReads, TheSameProcessReadsItsOwnPoolDirectlyWhenOptedIn) {
  // A reader of its own connector's pool (the kernel's checks hold for one's own process too),
  // the bytes checked; and a block past the pool is still refused, by the owner.
  OwnerHere here;
  auto& pool = here.pool;
  Reader reader;
  const auto before = direct_reads();
  EXPECT_EQ(reader.read(pool.metadata(), {12, 0, 6}, 10s), OperationStatus::Complete);
  EXPECT_EQ(direct_reads() - before, 1u) << "the owner served the READ: it was not direct";
  std::vector<BlockPair> past{{kBlocks, 0}};
  EXPECT_THROW(
      {
        auto transfer = reader.connector.read_blocks(pool.metadata(), past, reader.pool);
        transfer.wait_for_completion(10s);
      },
      Error);
  EXPECT_EQ(direct_reads() - before, 1u) << "a block past the pool was read directly";
}

}  // namespace
