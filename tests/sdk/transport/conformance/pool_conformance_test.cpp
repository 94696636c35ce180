// Pools over every transport that moves pool blocks: blocks by index, tags after their bytes,
// one registration for any number of transfers, revocation, stale generations, bad input.
#include <atomic>
#include <cstring>
#include <random>
#include <set>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/error_code_of.hpp"
#include "support/raw_stream_peer.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = 4096;

// Two regions, as a KV cache's K and V: 64 blocks back to back, and 32 blocks with a gap of a
// block between them (stride 2 blocks). Verbs serves no pool with bytes between its blocks (its
// keys cover spans): for it a third region of 32 blocks fills those gaps (blocks 96 to 127), as
// interleaved K/V regions do.
struct PoolMemory {
  explicit PoolMemory(bool fill_gaps)
      : packed(64 * kBlock), spaced(32 * 2 * kBlock), filled(fill_gaps) {}
  std::vector<BlockRegion> regions() {
    std::vector<BlockRegion> regions{{packed.data(), kBlock, 0, 64, {}},
                                     {spaced.data(), kBlock, 2 * kBlock, 32, {}}};
    if (filled) regions.push_back({spaced.data() + kBlock, kBlock, 2 * kBlock, 32, {}});
    return regions;
  }
  std::span<std::byte> block(std::uint64_t index) {
    if (index < 64) return std::span(packed).subspan(index * kBlock, kBlock);
    if (index < 96) return std::span(spaced).subspan((index - 64) * 2 * kBlock, kBlock);
    return std::span(spaced).subspan((index - 96) * 2 * kBlock + kBlock, kBlock);
  }
  std::vector<std::byte> packed, spaced;
  bool filled;
};

PoolOptions named(std::string name) {
  PoolOptions options;
  options.name = std::move(name);
  return options;
}

bool block_holds(PoolMemory& memory, std::uint64_t index, std::uint64_t seed) {
  return first_mismatch(memory.block(index), seed) == kBlock;
}

bool block_is_zero(PoolMemory& memory, std::uint64_t index) {
  for (auto byte : memory.block(index))
    if (byte != std::byte{0}) return false;
  return true;
}

// After a transfer of `pairs` into `landed` (the local side's blocks when `into_local`, else the
// remote's): each block a pair names holds the pattern seed_base + its source block, and every
// other of the 96 pool blocks is still zero.
void expect_exactly_the_pairs(PoolMemory& landed, const std::vector<BlockPair>& pairs,
                              bool into_local, std::uint64_t seed_base) {
  std::set<std::uint64_t> written;
  for (const auto& pair : pairs) {
    const auto target = into_local ? pair.local : pair.remote;
    const auto source = into_local ? pair.remote : pair.local;
    EXPECT_TRUE(block_holds(landed, target, seed_base + source)) << "block " << target;
    written.insert(target);
  }
  for (std::uint64_t b = 0; b < 96; ++b)
    if (!written.contains(b)) {
      EXPECT_TRUE(block_is_zero(landed, b)) << "block " << b << " touched";
    }
}

// Pairs that cover a run of consecutive blocks, blocks of both regions, and scattered ones.
std::vector<BlockPair> mixed_pairs() {
  std::vector<BlockPair> pairs;
  for (std::uint64_t i = 0; i < 16; ++i) pairs.push_back({10 + i, 20 + i});  // one run
  pairs.push_back({63, 64});                                                 // across regions
  pairs.push_back({70, 3});
  pairs.push_back({95, 95});
  pairs.push_back({0, 90});
  return pairs;
}

PoolOptions pool_options(bool read, bool write, std::size_t queued) {
  PoolOptions options;
  options.remote_read = read;
  options.remote_write = write;
  options.max_queued_notifications = queued;
  return options;
}

class PoolConformance : public PoolTransportConformance {
 protected:
  bool fill_gaps() const { return transport() == "verbs"; }
};

TEST_P(PoolConformance, ReadMovesExactlyTheNamedBlocks) {
  Connector owner(options()), reader(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  for (std::uint64_t b = 0; b < 96; ++b) fill_pattern(there.block(b), 1000 + b);
  auto remote = owner.register_pool(there.regions(), named("kv"));
  auto local = reader.register_pool(here.regions());
  const auto pairs = mixed_pairs();
  auto read = reader.read_blocks(remote.metadata(), pairs, local);
  ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), transport());
  expect_exactly_the_pairs(here, pairs, /*into_local=*/true, 1000);
  // Gaps between a spaced region's blocks are not the pool's: never touched.
  for (std::size_t i = 0; i < 32; ++i)
    for (std::size_t at = (2 * i + 1) * kBlock; at < (2 * i + 2) * kBlock; at += 512)
      ASSERT_EQ(here.spaced[at], std::byte{0});
}

TEST_P(PoolConformance, WriteMovesExactlyTheNamedBlocks) {
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  for (std::uint64_t b = 0; b < 96; ++b) fill_pattern(here.block(b), 2000 + b);
  auto remote = owner.register_pool(there.regions());
  auto local = writer.register_pool(here.regions());
  const auto pairs = mixed_pairs();
  auto write = writer.write_blocks(local, pairs, remote.metadata());
  ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  expect_exactly_the_pairs(there, pairs, /*into_local=*/false, 2000);
}

TEST_P(PoolConformance, LargeRunsMoveInChunks) {
  // Runs longer than a chunk go in several requests: still exactly these bytes.
  Connector owner(options(16384)), reader(options(16384));
  PoolMemory there(fill_gaps()), here(fill_gaps());
  for (std::uint64_t b = 0; b < 96; ++b) fill_pattern(there.block(b), 3000 + b);
  auto remote = owner.register_pool(there.regions());
  auto local = reader.register_pool(here.regions());
  std::vector<BlockPair> pairs;
  for (std::uint64_t b = 0; b < 64; ++b) pairs.push_back({b, b});
  auto read = reader.read_blocks(remote.metadata(), pairs, local, "all");
  ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  for (std::uint64_t b = 0; b < 64; ++b) EXPECT_TRUE(block_holds(here, b, 3000 + b));
  EXPECT_EQ(remote.wait_for_tag("all", 10s, {}, TagKinds::Reads).peer, reader.name());
  // And a write of many requests, its tag behind them: the owner has every byte at the tag.
  for (std::uint64_t b = 0; b < 64; ++b) fill_pattern(here.block(b), 3100 + b);
  std::atomic<int> early{0}, calls{0};
  remote.on_notification([&](const Notification&) {
    ++calls;
    for (std::uint64_t b = 0; b < 64; ++b)
      if (!block_holds(there, b, 3100 + b)) ++early;
  });
  auto write = reader.write_blocks(local, pairs, remote.metadata(), "back");
  ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(early.load(), 0) << "the tag came before some of its bytes";
}

TEST_P(PoolConformance, OneRegistrationServesManyTransfersAndPeers) {
  Connector owner(options()), first(options()), second(options());
  PoolMemory there(fill_gaps()), here_a(fill_gaps()), here_b(fill_gaps());
  for (std::uint64_t b = 0; b < 96; ++b) fill_pattern(there.block(b), 4000 + b);
  auto remote = owner.register_pool(there.regions());
  auto local_a = first.register_pool(here_a.regions());
  auto local_b = second.register_pool(here_b.regions());
  const auto metadata = remote.metadata();
  // Each reader's first transfer may set up its connection's access (verbs: windows bound,
  // or regions in its own protection domain); none after it registers anything.
  for (auto* pair : {&local_a, &local_b}) {
    auto& reader = pair == &local_a ? first : second;
    auto warm = reader.read_blocks(metadata, {{0, 0}}, *pair);
    ASSERT_EQ(warm.wait_for_completion(30s), OperationStatus::Complete);
  }
  const auto registered = owner.telemetry().registrations;
  const auto regions = owner.telemetry().memory_regions + first.telemetry().memory_regions +
                       second.telemetry().memory_regions;
  std::mt19937_64 random(7);
  for (int round = 0; round < 200; ++round) {
    const std::uint64_t block = random() % 96;
    auto& reader = round % 2 ? first : second;
    auto& local = round % 2 ? local_a : local_b;
    auto& here = round % 2 ? here_a : here_b;
    auto read = reader.read_blocks(metadata, {{block, block}}, local);
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete) << "round " << round;
    ASSERT_TRUE(block_holds(here, block, 4000 + block)) << "round " << round;
  }
  EXPECT_EQ(owner.telemetry().registrations, registered) << "a transfer registered memory";
  EXPECT_EQ(owner.telemetry().memory_regions + first.telemetry().memory_regions +
                second.telemetry().memory_regions,
            regions)
      << "a transfer registered device memory (ibv_reg_mr)";
  EXPECT_EQ(owner.telemetry().registered_bytes,
            64 * kBlock + 63 * kBlock + (fill_gaps() ? 63 * kBlock : 0))
      << "the pool's regions, once";
}

TEST_P(PoolConformance, TagsArriveAfterTheirBytesAndInOrder) {
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto remote = owner.register_pool(there.regions());
  auto local = writer.register_pool(here.regions());
  // At each tag, the callback checks that its block already holds what the writer sent.
  constexpr int kRounds = 96;
  std::atomic<int> seen{0}, out_of_order{0}, early{0};
  remote.on_notification([&](const Notification& notification) {
    const int round = std::stoi(notification.tag);
    if (round != seen.load()) ++out_of_order;
    if (!block_holds(there, static_cast<std::uint64_t>(round), 5000 + round)) ++early;
    ++seen;
  });
  std::vector<BlockTransfer> writes;
  for (int round = 0; round < kRounds; ++round) {
    fill_pattern(here.block(round), 5000 + round);
    writes.push_back(writer.write_blocks(local, {{std::uint64_t(round), std::uint64_t(round)}},
                                         remote.metadata(), std::to_string(round)));
  }
  for (auto& write : writes) ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(seen.load(), kRounds) << "a write completed before its tag was delivered";
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_EQ(early.load(), 0) << "a tag arrived before its bytes";
}

TEST_P(PoolConformance, AReadsTagReachesTheOwnerAfterTheReaderHasTheBytes) {
  Connector owner(options()), reader(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  fill_pattern(there.block(5), 6005);
  auto remote = owner.register_pool(there.regions());
  auto local = reader.register_pool(here.regions());
  auto read = reader.read_blocks(remote.metadata(), {{5, 7}}, local, "taken");
  const auto notification = remote.wait_for_tag("taken", 10s, {}, TagKinds::Reads);
  EXPECT_EQ(notification.peer, reader.name());
  EXPECT_TRUE(block_holds(here, 7, 6005)) << "the owner heard of the read before it landed";
  EXPECT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
}

TEST_P(PoolConformance, WaitsTakeTheirTagAndLeaveOthersQueued) {
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto remote = owner.register_pool(there.regions());
  auto local = writer.register_pool(here.regions());
  for (const char* tag : {"a", "b", "c"}) {
    auto write = writer.write_blocks(local, {{1, 1}}, remote.metadata(), tag);
    ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  }
  EXPECT_EQ(remote.wait_for_tag("b", 1s).tag, "b");
  EXPECT_EQ(remote.queued_notifications(), 2u);
  EXPECT_EQ(remote.next_notification(1s).tag, "a");
  EXPECT_EQ(remote.next_notification(1s).tag, "c");
  EXPECT_EQ(error_code_of([&] { remote.next_notification(50ms); }), ErrorCode::Timeout);
  EXPECT_EQ(error_code_of([&] { remote.wait_for_tag("never", 50ms); }), ErrorCode::Timeout);
}

TEST_P(PoolConformance, ADroppedPoolRefusesItsReadersAsStale) {
  Connector owner(options()), reader(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto local = reader.register_pool(here.regions());
  std::optional<Pool> remote(owner.register_pool(there.regions()));
  const auto metadata = remote->metadata();
  remote.reset();
  auto read = reader.read_blocks(metadata, {{0, 0}}, local);
  EXPECT_EQ(failure_code(read, 10s), ErrorCode::Expired);
  EXPECT_NE(read.error_message().find("stale pool metadata"), std::string::npos)
      << read.error_message();
}

TEST_P(PoolConformance, AClosedPoolEndsTheAccessOfPeersThatHeldItsKeys) {
  // A writer that moved blocks before holds the pool's keys (verbs: granted to its
  // connection); once the owner closes the pool, its next write moves nothing.
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto local = writer.register_pool(here.regions());
  std::optional<Pool> remote(owner.register_pool(there.regions()));
  const auto metadata = remote->metadata();
  fill_pattern(here.block(0), 11);
  for (int n = 0; n < 3; ++n) {  // the later ones under the keys the first was granted
    auto write = writer.write_blocks(local, {{0, 0}}, metadata, "w" + std::to_string(n));
    ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  }
  ASSERT_TRUE(block_holds(there, 0, 11));
  remote.reset();
  fill_pattern(here.block(1), 12);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto write = writer.write_blocks(local, {{1, 1}}, metadata, "late");
    EXPECT_EQ(failure_code(write, 10s), ErrorCode::Expired) << write.error_message();
    // Verbs: the keys held are refused by the NIC (the connection then goes); a new one is
    // told the metadata is stale, as the stream transports say at once.
    const bool keys_held = transport() == "verbs" && attempt == 0;
    EXPECT_NE(write.error_message().find(keys_held ? "no longer grants" : "stale pool metadata"),
              std::string::npos)
        << write.error_message();
    auto read = writer.read_blocks(metadata, {{0, 2}}, local);
    EXPECT_EQ(failure_code(read, 10s), ErrorCode::Expired) << read.error_message();
  }
  EXPECT_TRUE(block_is_zero(there, 1)) << "a closed pool was written";
  EXPECT_TRUE(block_is_zero(here, 2)) << "a closed pool was read";
}

TEST_P(PoolConformance, MetadataOfAnEarlierGenerationIsRefused) {
  Connector owner(options()), reader(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto local = reader.register_pool(here.regions());
  std::optional<Pool> remote(owner.register_pool(there.regions(), named("kv")));
  const auto old = remote->metadata();
  remote.reset();
  remote.emplace(owner.register_pool(there.regions(), named("kv")));
  EXPECT_GT(remote->metadata().generation(), old.generation());
  fill_pattern(here.block(0), 1);
  auto write = reader.write_blocks(local, {{0, 0}}, old);
  EXPECT_EQ(failure_code(write, 10s), ErrorCode::Expired);
  EXPECT_TRUE(block_is_zero(there, 0)) << "stale metadata moved bytes";
  // The same key with a forged generation: the owner checks it too.
  auto fields = remote->metadata().fields();
  fields.generation = old.generation();
  auto forged = PoolMetadata(std::move(fields));
  auto forged_write = reader.write_blocks(local, {{0, 0}}, forged);
  EXPECT_EQ(failure_code(forged_write, 10s), ErrorCode::Expired);
  EXPECT_TRUE(block_is_zero(there, 0));
}

TEST_P(PoolConformance, AForgedTokenMovesNothing) {
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto remote = owner.register_pool(there.regions());
  auto local = writer.register_pool(here.regions());
  fill_pattern(here.block(0), 1);
  const auto real = remote.metadata();
  auto fields = real.fields();
  fields.token = std::string(32, 'a');
  PoolMetadata forged(std::move(fields));
  auto write = writer.write_blocks(local, {{0, 0}}, forged, "forged");
  EXPECT_EQ(failure_code(write, 10s), ErrorCode::AccessDenied);
  EXPECT_TRUE(block_is_zero(there, 0));
  EXPECT_EQ(error_code_of([&] { remote.wait_for_tag("forged", 100ms); }), ErrorCode::Timeout);
}

TEST_P(PoolConformance, APoolRefusesWhatItsOptionsDoNotAllow) {
  Connector owner(options()), peer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto read_only = owner.register_pool(there.regions(), pool_options(true, false, 65536));
  auto local = peer.register_pool(here.regions());
  auto write = peer.write_blocks(local, {{0, 0}}, read_only.metadata(), "no");
  EXPECT_EQ(failure_code(write, 10s), ErrorCode::AccessDenied);
  // Never admitted: no tag, and no failure either (a failure ends only admitted transfers).
  EXPECT_EQ(error_code_of([&] { read_only.wait_for_tag("no", 300ms); }), ErrorCode::Timeout)
      << "the refused write's tag or failure reached the owner's waiters";
  EXPECT_EQ(read_only.refusals(), 1u) << "a write to a read-only pool is refused";
  EXPECT_EQ(read_only.peer_faults(), 0u) << "and is no protocol fault";
  auto read = peer.read_blocks(read_only.metadata(), {{0, 0}}, local);
  EXPECT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
}

TEST_P(PoolConformance, BadPairsAreRefusedBeforeAnythingMoves) {
  Connector owner(options()), peer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  std::vector<std::byte> big(4 * 2 * kBlock);
  auto remote = owner.register_pool(there.regions());
  auto local = peer.register_pool(here.regions());
  auto other = peer.register_pool({{big.data(), 2 * kBlock, 0, 4, {}}});
  const auto metadata = remote.metadata();
  EXPECT_EQ(error_code_of([&] {
              (void)peer.read_blocks(metadata, {{metadata.block_count(), 0}}, local);
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] {
              (void)peer.read_blocks(metadata, {{0, local.block_count()}}, local);
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)peer.read_blocks(metadata, {}, local); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] {
              (void)peer.read_blocks(metadata, {{0, 0}}, other);
            }),
            ErrorCode::SizeMismatch);
  EXPECT_EQ(error_code_of([&] {
              (void)peer.write_blocks(local, {{0, 0}}, metadata,
                                      std::string(Connector::kMaxTagBytes + 1, 't'));
            }),
            ErrorCode::InvalidArgument);
  // A pool of another connector is no local pool here.
  EXPECT_EQ(error_code_of([&] {
              (void)peer.read_blocks(metadata, {{0, 0}}, remote);
            }),
            ErrorCode::InvalidArgument);
}

TEST_P(PoolConformance, AFullNotificationQueueFailsTheSender) {
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto remote = owner.register_pool(there.regions(), pool_options(true, true, 3));
  auto local = writer.register_pool(here.regions());
  for (int n = 0; n < 3; ++n) {
    auto write = writer.write_blocks(local, {{0, 0}}, remote.metadata(), std::to_string(n));
    ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  }
  auto refused = writer.write_blocks(local, {{0, 0}}, remote.metadata(), "3");
  EXPECT_EQ(failure_code(refused, 10s), ErrorCode::Transport);
  EXPECT_NE(refused.error_message().find("max_queued_notifications"), std::string::npos);
  EXPECT_EQ(remote.next_notification(1s).tag, "0");
  auto again = writer.write_blocks(local, {{0, 0}}, remote.metadata(), "4");
  EXPECT_EQ(again.wait_for_completion(10s), OperationStatus::Complete);
}

TEST_P(PoolConformance, ACancelledTaggedTransferEndsTheWaitForItsTag) {
  Connector owner(options()), writer(options());
  PoolMemory there(fill_gaps());
  std::vector<std::byte> big(256u << 20);
  auto remote = owner.register_pool(there.regions());
  // One block of 256 MiB: its write is still under way when it is cancelled.
  auto local = writer.register_pool({{big.data(), big.size(), 0, 1, {}}});
  std::vector<std::byte> target(big.size());
  auto target_pool = owner.register_pool({{target.data(), target.size(), 0, 1, {}}});
  fill_pattern(big, 77);
  auto write = writer.write_blocks(local, {{0, 0}}, target_pool.metadata(), "big");
  write.cancel();
  try {
    target_pool.wait_for_tag("big", 10s);
    // The cancel came after every byte had left, and the tag behind them: it was delivered,
    // and the bytes are there. The failure notice that followed changed nothing.
    EXPECT_EQ(first_mismatch(target, 77), target.size());
    EXPECT_EQ(error_code_of([&] { target_pool.wait_for_tag("big", 200ms); }), ErrorCode::Timeout);
  } catch (const Error& error) {
    // A cancel is told as such (issue 32); a lost connection would be PeerLost.
    EXPECT_EQ(error.code(), ErrorCode::Cancelled) << error.what();
    EXPECT_NE(std::string(error.what()).find("big"), std::string::npos) << error.what();
  }
}

TEST_P(PoolConformance, ClosingALocalPoolFailsItsTransfersFirst) {
  Connector owner(options()), reader(options());
  std::vector<std::byte> source(256u << 20), target(source.size());
  auto remote = owner.register_pool({{source.data(), source.size(), 0, 1, {}}});
  std::optional<Pool> local(reader.register_pool({{target.data(), target.size(), 0, 1, {}}}));
  auto read = reader.read_blocks(remote.metadata(), {{0, 0}}, *local);
  within(30s, "closing a pool under a read", [&] { local.reset(); });
  // Once close returned, nothing writes into `target`: the read ended (or had completed).
  EXPECT_TRUE(is_terminal(read.status()));
  if (read.status() != OperationStatus::Complete) {
    EXPECT_EQ(failure_code(read, 1s), ErrorCode::Cancelled);
  }
}

// Over tcp alone, not a case of every transport: the raw peer speaks the stream protocol over
// tcp (a parameterized case would skip on shm and verbs, and the conformance suite's tcp and shm
// cases never skip).
TEST(PoolOverTcp, ALostPeerEndsWaitsForTags) {
  Connector owner(conformance_options("tcp"));
  PoolMemory there(/*fill_gaps=*/false);
  auto remote = owner.register_pool(there.regions());
  const auto pool = remote.metadata();
  std::thread waiter;
  ErrorCode ended = ErrorCode::Protocol;
  waiter = std::thread([&] { ended = error_code_of([&] { remote.wait_for_tag("L0", 20s); }); });
  {
    // A writer that sends a tagged request and vanishes before its tag.
    memwire::test_support::RawStreamPeer raw(pool);
    raw.pool_request(detail::FrameType::PoolWriteRequest, 77, {{0, 0, 0, kBlock, 0}}, "L0", 0,
                     std::vector<std::byte>(kBlock));
    EXPECT_EQ(raw.answer().first, 0);
  }
  waiter.join();
  EXPECT_EQ(ended, ErrorCode::PeerLost);
}

TEST_P(PoolConformance, LayersStreamInOrderEachUsableWhenItsWaitReturns) {
  // Two requests stream 16 layers each (K and V: 2 blocks a layer) into one decode pool at
  // once; decode consumes each stream's layers in order as they come.
  Connector decode(options()), prefill(options());
  PoolMemory there(fill_gaps()), here(fill_gaps());
  auto kv = decode.register_pool(there.regions());
  auto local = prefill.register_pool(here.regions());
  constexpr std::uint32_t kLayers = 16;
  auto blocks_of = [](std::uint32_t stream, std::uint32_t layer) {
    const std::uint64_t first = stream * 2 * kLayers + 2 * layer;
    return std::vector<BlockPair>{{first, first}, {first + 1, first + 1}};
  };
  std::atomic<int> bad{0};
  std::vector<std::thread> consumers;
  for (std::uint32_t stream = 0; stream < 2; ++stream)
    consumers.emplace_back([&, stream] {
      LayerReceiver receive(kv, "req-" + std::to_string(stream), prefill.name());
      for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
        receive.wait(layer, 20s);
        for (const auto& pair : blocks_of(stream, layer))
          if (!block_holds(there, pair.remote, 7000 + pair.local)) ++bad;
      }
    });
  LayerSender first(prefill, local, kv.metadata(), "req-0");
  LayerSender second(prefill, local, kv.metadata(), "req-1");
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    for (std::uint32_t stream = 0; stream < 2; ++stream)
      for (const auto& pair : blocks_of(stream, layer))
        fill_pattern(here.block(pair.local), 7000 + pair.local);  // "computed"
    first.send(layer, blocks_of(0, layer));
    second.send(layer, blocks_of(1, layer));
  }
  first.finish(20s);
  second.finish(20s);
  for (auto& consumer : consumers) consumer.join();
  EXPECT_EQ(bad.load(), 0) << "a layer's wait returned before its blocks were in the pool";
  EXPECT_EQ(kv.queued_notifications(), 0u);
  EXPECT_EQ(
      error_code_of([&] { LayerSender(prefill, local, kv.metadata(), std::string(1100, 's')); }),
      ErrorCode::InvalidArgument);
}

MEMWIRE_CONFORMANCE_SUITE(PoolConformance);

}  // namespace
