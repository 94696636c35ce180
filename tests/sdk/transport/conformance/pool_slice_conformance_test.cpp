// Block slices over every transport (issue 32, item 1): pools whose blocks hold different shares
// of a KV cache (prefill and decode at different tensor parallelism, or prefill blocks smaller
// than decode's) move exactly the sliced bytes of each pair and nothing else; bad slices are
// refused before anything moves. Every pool starts filled with a pattern of its own, and after
// each transfer each pool must equal what the slices say it holds, byte for byte.
#include <cstring>
#include <limits>
#include <optional>
#include <span>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/error_code_of.hpp"
#include "support/raw_stream_peer.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kDecodeBlock = 4096;  // TP 1: every head of a block
constexpr std::uint64_t kHalf = kDecodeBlock / 2;
constexpr std::uint64_t kQuarter = kDecodeBlock / 4;
constexpr std::uint64_t kBlocks = 32;

// A pool's memory, blocks back to back unless `stride` says otherwise (verbs serves no pool
// with gaps), filled with a pattern of its own, gaps included; `expected` is what it must hold
// after the transfers so far.
struct PoolBytes {
  PoolBytes(std::uint64_t block_size, std::uint64_t count, std::uint64_t seed,
            std::uint64_t block_stride = 0)
      : block(block_size),
        stride(block_stride == 0 ? block_size : block_stride),
        memory(stride * count) {
    fill_pattern(memory, seed);
    expected = memory;
  }
  std::vector<BlockRegion> regions() {
    return {{memory.data(), block, stride, memory.size() / stride, {}}};
  }
  std::uint64_t block, stride;
  std::vector<std::byte> memory, expected;
};

// Where `pool` differs from what it should hold, or empty.
std::string difference(const PoolBytes& pool) {
  for (std::size_t i = 0; i < pool.memory.size(); ++i)
    if (pool.memory[i] != pool.expected[i])
      return "block " + std::to_string(i / pool.stride) + " byte " +
             std::to_string(i % pool.stride) + " differs";
  return {};
}

enum class Direction { Read, Write };

// What a transfer must change: for each pair, the slice's bytes of the source block land in
// the destination block (a read's source is the remote pool, a write's the local one).
void expect_transfer(Direction direction, const PoolBytes& remote, const PoolBytes& local,
                     const std::vector<BlockPair>& pairs, const BlockSlice& slice,
                     PoolBytes& destination) {
  for (const auto& pair : pairs) {
    const auto remote_at = pair.remote * remote.stride + slice.remote_offset + pair.remote_offset;
    const auto local_at = pair.local * local.stride + slice.local_offset + pair.local_offset;
    if (direction == Direction::Read)
      std::memcpy(destination.expected.data() + local_at, remote.memory.data() + remote_at,
                  slice.length);
    else
      std::memcpy(destination.expected.data() + remote_at, local.memory.data() + local_at,
                  slice.length);
  }
}

// Pairs with a run of consecutive blocks, scattered ones and the last block.
std::vector<BlockPair> mixed_pairs() {
  std::vector<BlockPair> pairs;
  for (std::uint64_t i = 0; i < 8; ++i) pairs.push_back({i, 10 + i});
  pairs.push_back({20, 3});
  pairs.push_back({kBlocks - 1, kBlocks - 1});
  pairs.push_back({5, 0});
  return pairs;
}

class PoolSliceConformance : public PoolTransportConformance {
 protected:
  // Reads `pairs`' slice from `owner`'s pool into `reader`'s, then writes the same pairs'
  // slice from `writer`'s pool into `owner`'s, tagged; checks all of them byte for byte.
  void read_then_write(PoolBytes& there, PoolBytes& here, const std::vector<BlockPair>& pairs,
                       const BlockSlice& slice) {
    Connector owner(options()), peer(options());
    auto remote = owner.register_pool(there.regions());
    auto local = peer.register_pool(here.regions());
    auto read = peer.read_blocks(remote.metadata(), pairs, local, slice, "read");
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(read.transport(), transport());
    EXPECT_EQ(remote.wait_for_tag("read", 10s, {}, TagKinds::Reads).peer, peer.name());
    expect_transfer(Direction::Read, there, here, pairs, slice, here);
    EXPECT_EQ(difference(here), "") << "read";
    EXPECT_EQ(difference(there), "") << "a read changed its source";

    fill_pattern(here.memory, 77);
    here.expected = here.memory;
    auto write = peer.write_blocks(local, pairs, remote.metadata(), slice, "write");
    // The tag arrives only after the sliced bytes are in the owner's memory.
    EXPECT_EQ(remote.wait_for_tag("write", 10s).peer, peer.name());
    expect_transfer(Direction::Write, there, here, pairs, slice, there);
    EXPECT_EQ(difference(there), "") << "write";
    ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(difference(here), "") << "a write changed its source";
  }
};

// Decode at TP 1 (blocks of every head), prefill at TP 2 (each rank's blocks hold half the
// heads): decode gathers each block's halves from the two ranks, one transfer per rank; and the
// ranks write their halves into decode's blocks, each tagged, as a LayerSender does.
TEST_P(PoolSliceConformance, Tp2To1GathersEachRanksHalfOfEveryBlock) {
  Connector decode(options()), rank0(options()), rank1(options());
  PoolBytes decode_kv(kDecodeBlock, kBlocks, 1), kv0(kHalf, kBlocks, 2), kv1(kHalf, kBlocks, 3);
  auto local = decode.register_pool(decode_kv.regions());
  auto pool0 = rank0.register_pool(kv0.regions());
  auto pool1 = rank1.register_pool(kv1.regions());
  const auto pairs = mixed_pairs();
  std::vector<PoolBytes*> ranks{&kv0, &kv1};
  std::vector<Pool*> pools{&pool0, &pool1};
  for (std::uint64_t k = 0; k < 2; ++k) {
    const BlockSlice slice{.local_offset = k * kHalf, .length = kHalf};
    auto read = decode.read_blocks(pools[k]->metadata(), pairs, local, slice);
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(read.transport(), transport());
    expect_transfer(Direction::Read, *ranks[k], decode_kv, pairs, slice, decode_kv);
    EXPECT_EQ(difference(decode_kv), "") << "rank " << k;
  }
  EXPECT_EQ(difference(kv0), "");
  EXPECT_EQ(difference(kv1), "");

  // Writes: the owner is decode; each rank's tag arrives after its halves.
  Connector owner(options());
  PoolBytes decode_owned(kDecodeBlock, kBlocks, 4);
  auto kv = owner.register_pool(decode_owned.regions());
  std::vector<Connector*> senders{&rank0, &rank1};
  for (std::uint64_t k = 0; k < 2; ++k) {
    const BlockSlice slice{.remote_offset = k * kHalf, .length = kHalf};
    LayerSender send(*senders[k], *pools[k], kv.metadata(), "req-" + std::to_string(k));
    send.send(0, pairs, slice);
    LayerReceiver(kv, "req-" + std::to_string(k)).wait(0, 10s);
    expect_transfer(Direction::Write, decode_owned, *ranks[k], pairs, slice, decode_owned);
    EXPECT_EQ(difference(decode_owned), "") << "rank " << k << "'s tag came before its bytes";
    send.finish(10s);
  }
}

// Decode at TP 2, prefill at TP 1: decode rank k reads the k-th half of each prefill block
// into its own blocks of half the size, and prefill writes each rank its half.
TEST_P(PoolSliceConformance, Tp1To2MovesEachRankItsHalf) {
  for (std::uint64_t k = 0; k < 2; ++k) {
    PoolBytes prefill(kDecodeBlock, kBlocks, 10 + k), decode_rank(kHalf, kBlocks, 20 + k);
    // Reads: the owner is prefill (remote), decode's rank the reader (local).
    read_then_write(prefill, decode_rank, mixed_pairs(),
                    {.remote_offset = k * kHalf, .length = kHalf});
  }
  for (std::uint64_t k = 0; k < 2; ++k) {
    PoolBytes decode_rank(kHalf, kBlocks, 30 + k), prefill(kDecodeBlock, kBlocks, 40 + k);
    // The other way round: decode's rank owns, prefill's block is the local one.
    read_then_write(decode_rank, prefill, mixed_pairs(),
                    {.local_offset = k * kHalf, .length = kHalf});
  }
}

// Prefill blocks a quarter of decode's: four prefill blocks fill one decode block, at
// consecutive offsets, named per pair. Some of them consecutive on both sides (one run), some
// scattered and out of order.
TEST_P(PoolSliceConformance, FourSmallBlocksFillOneLargeBlock) {
  std::vector<BlockPair> into_decode;  // remote: prefill's small blocks; local: decode's
  const std::vector<std::uint64_t> decode_blocks{4, 5, 6, 20, 9};
  for (std::size_t j = 0; j < decode_blocks.size(); ++j)
    for (std::uint64_t i = 0; i < 4; ++i) {
      const std::uint64_t small = j < 3 ? 4 * j + i : 100 - 4 * j - i;  // a run, then scattered
      into_decode.push_back(
          {.remote = small, .local = decode_blocks[j], .local_offset = i * kQuarter});
    }
  const BlockSlice quarter{.length = kQuarter};
  {
    PoolBytes prefill(kQuarter, 4 * kBlocks, 50), decode_kv(kDecodeBlock, kBlocks, 51);
    read_then_write(prefill, decode_kv, into_decode, quarter);
  }
  // Prefill writing its small blocks into decode's large ones: the pair names the remote offset.
  std::vector<BlockPair> from_prefill;
  for (const auto& pair : into_decode)
    from_prefill.push_back(
        {.remote = pair.local, .local = pair.remote, .remote_offset = pair.local_offset});
  PoolBytes decode_kv(kDecodeBlock, kBlocks, 52), prefill(kQuarter, 4 * kBlocks, 53);
  read_then_write(decode_kv, prefill, from_prefill, quarter);
}

// A slice at no particular boundary, between pools of equal blocks, with a pair offset too.
TEST_P(PoolSliceConformance, AnUnalignedSliceMovesExactlyItsBytes) {
  auto pairs = mixed_pairs();
  pairs.push_back({.remote = 12, .local = 30, .remote_offset = 1000, .local_offset = 7});
  PoolBytes there(kDecodeBlock, kBlocks, 60), here(kDecodeBlock, kBlocks, 61);
  read_then_write(there, here, pairs, {.remote_offset = 100, .local_offset = 1001, .length = 777});
}

// Blocks with gaps between them (a strided region), on both sides: slices of them move, and
// no byte of a gap does.
TEST_P(PoolSliceConformance, SlicesOfStridedBlocksLeaveTheGapsAlone) {
  if (transport() == "verbs")
    GTEST_SKIP() << "verbs serves no pool with gaps (its keys cover spans)";
  PoolBytes there(kDecodeBlock, kBlocks, 62, 2 * kDecodeBlock), here(kHalf, kBlocks, 63, 3 * kHalf);
  read_then_write(there, here, mixed_pairs(), {.remote_offset = kHalf, .length = kHalf});
  PoolBytes prefill(kQuarter, 4 * kBlocks, 64, kDecodeBlock), decode_kv(kDecodeBlock, kBlocks, 65);
  std::vector<BlockPair> four_into_one;
  for (std::uint64_t i = 0; i < 8; ++i)
    four_into_one.push_back(
        {.remote = 20 + i, .local = 3 + i / 4, .local_offset = (i % 4) * kQuarter});
  read_then_write(prefill, decode_kv, four_into_one, {.length = kQuarter});
}

TEST_P(PoolSliceConformance, BadSlicesAreRefusedBeforeAnythingMoves) {
  Connector owner(options()), peer(options());
  PoolBytes there(kDecodeBlock, kBlocks, 70), here(kHalf, kBlocks, 71);
  auto remote = owner.register_pool(there.regions());
  auto local = peer.register_pool(here.regions());
  const auto metadata = remote.metadata();
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  struct Case {
    const char* what;
    std::vector<BlockPair> pairs;
    std::optional<BlockSlice> slice;
    ErrorCode code;
    const char* names;  // what the message must name
  };
  const std::vector<Case> cases{
      {"past a remote block",
       {{0, 0}},
       BlockSlice{.remote_offset = kHalf, .length = kHalf + 1},
       ErrorCode::SizeMismatch,
       "remote block 0"},
      {"past a local block",
       {{0, 0}},
       BlockSlice{.local_offset = 1, .length = kHalf},
       ErrorCode::SizeMismatch,
       "local block 0"},
      {"one good pair, then one past its local block",
       {{0, 0}, {.remote = 1, .local = 1, .local_offset = kHalf - 8}},
       BlockSlice{.length = 16},
       ErrorCode::SizeMismatch,
       "pair 1"},
      {"zero length", {{0, 0}}, BlockSlice{.length = 0}, ErrorCode::InvalidArgument, "0 bytes"},
      {"a slice's offset that overflows",
       {{0, 0}},
       BlockSlice{.remote_offset = kMax - 10, .length = 100},
       ErrorCode::InvalidArgument,
       "overflows"},
      {"a pair's offset that overflows",
       {{.remote = 0, .local = 0, .local_offset = kMax}},
       BlockSlice{.local_offset = 1, .length = 1},
       ErrorCode::InvalidArgument,
       "overflows"},
      {"blocks of different sizes, unsliced",
       {{0, 0}},
       std::nullopt,
       ErrorCode::SizeMismatch,
       "BlockSlice"},
      {"a pair's offset without a slice",
       {{.remote = 0, .local = 0, .remote_offset = 8}},
       std::nullopt,
       ErrorCode::InvalidArgument,
       "BlockSlice"},
      {"a block past the pool's end",
       {{kBlocks, 0}},
       BlockSlice{.length = 8},
       ErrorCode::InvalidArgument,
       "past the pool's"},
  };
  for (const auto& bad : cases)
    for (auto direction : {Direction::Read, Direction::Write}) {
      try {
        if (direction == Direction::Read) {
          auto t = bad.slice ? peer.read_blocks(metadata, bad.pairs, local, *bad.slice, "bad")
                             : peer.read_blocks(metadata, bad.pairs, local, "bad");
          t.wait_for_completion(5s);
        } else {
          auto t = bad.slice ? peer.write_blocks(local, bad.pairs, metadata, *bad.slice, "bad")
                             : peer.write_blocks(local, bad.pairs, metadata, "bad");
          t.wait_for_completion(5s);
        }
        ADD_FAILURE() << bad.what << ": not refused";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), bad.code) << bad.what << ": " << error.what();
        EXPECT_NE(std::string(error.what()).find(bad.names), std::string::npos)
            << bad.what << ": " << error.what();
      }
    }
  EXPECT_EQ(error_code_of([&] { (void)remote.wait_for_tag("bad", 200ms); }), ErrorCode::Timeout);
  EXPECT_EQ(difference(there), "") << "a refused transfer moved bytes";
  EXPECT_EQ(difference(here), "") << "a refused transfer moved bytes";
  EXPECT_EQ(remote.peer_faults(), 0u);
}

// An owner cannot tell a slice from any other piece, and need not: whatever a peer asks, every
// piece must lie in the pool's blocks. A hostile slice that runs out of a block into the gap
// after it is refused; one inside a block lands exactly. Raw frames over tcp (shm's are alike).
TEST(PoolSliceOverRawFrames, TheOwnerChecksEveryPieceOfASlice) {
  Connector owner(conformance_options("tcp"));
  std::vector<std::byte> spaced(8 * 2 * kHalf);
  fill_pattern(spaced, 80);
  auto expected = spaced;
  auto pool = owner.register_pool({{spaced.data(), kHalf, 2 * kHalf, 8, {}}});
  RawStreamPeer raw(pool.metadata());
  raw.hello("slicer");
  using detail::FrameType;
  // Half of block 3, from offset 100: inside it.
  const std::uint64_t inside = 3 * 2 * kHalf + 100;
  std::vector<std::byte> bytes(kHalf / 2, std::byte{'w'});
  raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, inside, kHalf / 2}}, "", 0, bytes);
  EXPECT_EQ(raw.answer().first, 0);
  std::memcpy(expected.data() + inside, bytes.data(), bytes.size());
  // The same slice of block 4 shifted to cross its end: refused, nothing written.
  const std::uint64_t crossing = 4 * 2 * kHalf + kHalf - kHalf / 4;
  raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, crossing, kHalf / 2}}, "", 0, bytes);
  EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::AccessDenied));
  raw.pool_request(FrameType::PoolReadRequest, 1, {{0, 0, crossing, kHalf / 2}}, "");
  EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(spaced, expected);
}

MEMWIRE_CONFORMANCE_SUITE(PoolSliceConformance);

}  // namespace
