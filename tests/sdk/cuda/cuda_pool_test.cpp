// Pools in GPU memory (sdk/src/cuda/gpu_pool_memory.*, the owner's side in
// transport/stream/stream_passive_gpu.cpp, CUDA IPC pieces in transport/stream/cuda_ipc_*).
// The checks of a peer's allocation table run everywhere; the rest needs a GPU and its driver
// and skips elsewhere, saying why. Between two processes, bench/cuda_pool_bench moves and checks
// the blocks through real IPC handles.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "cuda/ipc_mappings.hpp"
#include "memwire/memwire.hpp"
#include "support/cuda_memory.hpp"
#include "support/error_code_of.hpp"
#include "support/pattern.hpp"
#include "support/random_pairs.hpp"
#include "support/tcp_only.hpp"
#include "transport/stream/cuda_ipc_pieces.hpp"
#include "transport/stream/frame.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::detail::CudaDriver;
using memwire::detail::FrameIpcAllocation;
using memwire::detail::FramePiece;
using memwire::detail::OpenedAllocation;
using namespace memwire::test_support;

namespace {

std::optional<ErrorCode> code_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.code();
  }
  return std::nullopt;
}

// A table of one allocation of 1 MiB at 0x10000, which opens at `opened` with `size` bytes.
struct OneAllocation {
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 20);
  FrameIpcAllocation entry{{}, 0x10000, 1 << 20};
  int opens = 0;
  OpenedAllocation open_with(std::uint64_t size) {
    ++opens;
    return {memory.data(), size};
  }
};

}  // namespace

TEST(CudaIpcPieces, APieceInsideItsAllocationIsPlacedThere) {
  OneAllocation one;
  const std::vector<FramePiece> pieces{{0, 0, 0, 4096, 0x10000 + 8192}, {0, 0, 0, 4096, 0x10000}};
  const auto places = detail::place_ipc_pieces(
      pieces, {&one.entry, 1}, [&](const FrameIpcAllocation&) { return one.open_with(1 << 20); });
  ASSERT_EQ(places.size(), 2u);
  EXPECT_EQ(places[0], one.memory.data() + 8192);
  EXPECT_EQ(places[1], one.memory.data());
  EXPECT_EQ(one.opens, 1);  // once per request entry
}

// A peer's table is hostile input: each lie is a Protocol error naming it, before any copy.
TEST(CudaIpcPieces, EveryLieOfThePeerIsRefusedBeforeAByteMoves) {
  OneAllocation one;
  auto place = [&](FramePiece piece, std::uint64_t opened_size) {
    return message_of([&] {
      (void)detail::place_ipc_pieces({&piece, 1}, {&one.entry, 1}, [&](const FrameIpcAllocation&) {
        return one.open_with(opened_size);
      });
    });
  };
  EXPECT_NE(place({0, 1, 0, 16, 0x10000}, 1 << 20).find("names allocation 1 of 1"),
            std::string::npos);
  EXPECT_NE(place({0, 0, 0, 16, 0x10000}, 4096).find("the opened allocation has 4096"),
            std::string::npos);
  EXPECT_NE(place({0, 0, 0, 16, 0x10000 + (1 << 20) - 8}, 1 << 20).find("outside"),
            std::string::npos);
  EXPECT_NE(place({0, 0, 0, 16, 0x8000}, 1 << 20).find("outside"), std::string::npos);
  EXPECT_NE(place({0, 0, 0, ~std::uint64_t{0}, 0x10000}, 1 << 20).find("outside"),
            std::string::npos);
  const FramePiece piece{0, 0, 0, 16, 0x10000};
  EXPECT_EQ(code_of([&] {
              (void)detail::place_ipc_pieces(
                  {&piece, 1}, {&one.entry, 1}, [](const FrameIpcAllocation&) -> OpenedAllocation {
                    throw Error(ErrorCode::Transport, "cuIpcOpenMemHandle: invalid handle");
                  });
            }),
            ErrorCode::Protocol);
}

// A version 2 (CUDA IPC) frame header of `type` whose table holds `allocations` entries.
template <class Header>
Header with_ipc_table(detail::FrameType type, decltype(Header::ipc_allocations) allocations) {
  Header header;
  header.type = type;
  header.flags = detail::frame_flags::kCudaIpc | detail::frame_flags::kCrossMemory;
  header.ipc_allocations = allocations;
  header.version = detail::kCudaIpcVersion;
  return header;
}

// The wire: a table is bounded by the piece count, and only version 2 frames carry one, so a
// build that predates CUDA IPC refuses such a frame by its version instead of misreading it.
TEST(CudaIpcFrames, TheTableIsBoundedAndVersioned) {
  auto pool = with_ipc_table<detail::PoolFrameHeader>(detail::FrameType::PoolWriteRequest, 2);
  pool.piece_count = 4;
  auto header = detail::as_frame(pool);
  EXPECT_EQ(detail::frame_header_problem(header), std::nullopt);
  EXPECT_EQ(detail::piece_request_inline_bytes(header), 4 * 32 + 2 * 80u);
  pool.ipc_allocations = 5;  // more allocations than pieces
  EXPECT_EQ(detail::piece_request_inline_bytes(detail::as_frame(pool)), 0u);
  pool.ipc_allocations = 0;
  EXPECT_EQ(detail::piece_request_inline_bytes(detail::as_frame(pool)), 0u);
  pool.ipc_allocations = 2;
  pool.version = detail::FrameHeader::kVersion;  // an IPC table in a version 1 frame
  EXPECT_NE(detail::frame_header_problem(detail::as_frame(pool)), std::nullopt);
  detail::FrameHeader plain;
  plain.type = detail::FrameType::PoolReadRequest;
  plain.version = detail::kCudaIpcVersion;  // version 2 without an IPC table
  EXPECT_NE(detail::frame_header_problem(plain), std::nullopt);
}

// One-shot piece requests carry the same table, its count in the header's bytes 12-15: bounded
// by the piece count, version 2 only; a version 2 one-shot request names its version in the
// refusal an older build gives.
TEST(CudaIpcFrames, OneShotRequestsCarryABoundedTableInVersion2Only) {
  auto header = with_ipc_table<detail::FrameHeader>(detail::FrameType::ReadPiecesRequest, 1);
  header.index = 3;
  EXPECT_EQ(detail::frame_header_problem(header), std::nullopt);
  EXPECT_EQ(detail::piece_request_inline_bytes(header), 3 * 32 + 80u);
  header.ipc_allocations = 4;
  EXPECT_EQ(detail::piece_request_inline_bytes(header), 0u);
  header.ipc_allocations = 0;
  EXPECT_EQ(detail::piece_request_inline_bytes(header), 0u);
  header.ipc_allocations = 1;
  header.version = detail::FrameHeader::kVersion;
  const auto problem = detail::frame_header_problem(header);
  ASSERT_NE(problem, std::nullopt);
  EXPECT_NE(problem->find("frame version 1"), std::string::npos) << *problem;
  detail::FrameHeader plain;
  plain.type = detail::FrameType::WritePiecesRequest;
  plain.index = 2;
  EXPECT_EQ(detail::piece_request_inline_bytes(plain), 2 * 32u);  // no table without the flag
  plain.version = detail::kCudaIpcVersion;
  EXPECT_NE(detail::frame_header_problem(plain), std::nullopt);
}

TEST(CudaPoolWithoutDriver, AGpuPoolIsRefusedWithTheReason) {
  if (CudaDriver::get() != nullptr) GTEST_SKIP() << "a CUDA driver is loaded here";
  Connector connector(transport_only("tcp"));
  std::byte byte{};
  const auto action = [&] {
    (void)connector.register_pool({{&byte, 1, 0, 1, Device(DeviceKind::Cuda, 0)}});
  };
  EXPECT_EQ(code_of(action), ErrorCode::InvalidArgument);
  EXPECT_NE(message_of(action).find("CUDA driver"), std::string::npos) << message_of(action);
}

TEST(CudaPoolRegions, HostAndGpuRegionsDoNotMixInOnePool) {
  std::vector<std::byte> host(4096);
  Connector connector(transport_only("tcp"));
  EXPECT_EQ(code_of([&] {
              (void)connector.register_pool({{host.data(), 1024, 0, 4, {}},
                                             {host.data(), 1024, 0, 4, Device::parse("cuda:0")}});
            }),
            ErrorCode::InvalidArgument);
}

TEST(CudaPoolRegions, HostMemoryNamedCudaAndSpansPastTheAllocationAreRefused) {
  REQUIRE_CUDA();
  Connector connector(transport_only("tcp"));
  std::vector<std::byte> host(4096);
  EXPECT_EQ(code_of([&] {
              (void)connector.register_pool({{host.data(), 1024, 0, 4, Device::parse("cuda:0")}});
            }),
            ErrorCode::InvalidArgument);
  auto* device = driver->allocate_device(1 << 20);
  EXPECT_EQ(code_of([&] {
              (void)connector.register_pool({{device, 65536, 0, 17, Device::parse("cuda:0")}});
            }),
            ErrorCode::InvalidArgument);
  driver->free_device(device);
}

// A handle that is no allocation's does not open: the driver's refusal, not a crash.
TEST(CudaIpcMappings, AForgedHandleDoesNotOpen) {
  REQUIRE_CUDA();
  CudaDriver::IpcHandle forged;
  std::memset(forged.bytes, 0x5a, sizeof forged.bytes);
  detail::IpcMappings mappings;
  EXPECT_EQ(code_of([&] { (void)mappings.open(*driver, 0, forged); }), ErrorCode::Transport);
}

// Two GPU pools, or a GPU and a host pool, over each transport of one host: blocks by index
// (random ones, both ways), tags after the bytes, stale metadata, pairs of unequal blocks.
class CudaPool : public ::testing::TestWithParam<std::string> {};

namespace {
constexpr std::uint64_t kBlock = 65536;
constexpr std::uint64_t kBlocks = 256;

struct GpuPoolMemory {
  const CudaDriver& driver;
  void* memory = driver.allocate_device(kBlock * kBlocks);
  ~GpuPoolMemory() { driver.free_device(memory); }
  std::vector<std::byte> download() const {
    std::vector<std::byte> host(kBlock * kBlocks);
    driver.copy_to_host(host.data(), memory, host.size());
    return host;
  }
  void upload(const std::vector<std::byte>& host) const {
    driver.copy_to_device(memory, host.data(), host.size());
  }
  BlockRegion region() const { return {memory, kBlock, 0, kBlocks, Device::parse("cuda:0")}; }
};

std::vector<BlockPair> random_pairs(std::uint64_t seed, std::size_t count) {
  return test_support::random_pairs(kBlocks, count, seed);
}

// Whether every pair's bytes agree between the two pools' memory.
std::string pairs_differ(const std::vector<BlockPair>& pairs, const std::vector<std::byte>& remote,
                         const std::vector<std::byte>& local) {
  for (const auto& pair : pairs)
    if (std::memcmp(remote.data() + pair.remote * kBlock, local.data() + pair.local * kBlock,
                    kBlock) != 0)
      return "remote block " + std::to_string(pair.remote) + " != local block " +
             std::to_string(pair.local);
  return "";
}
}  // namespace

TEST_P(CudaPool, GpuBlocksMoveByIndexBothWaysWithTagsAfterTheirBytes) {
  REQUIRE_CUDA();
  Connector owner(transport_only(GetParam())), peer(transport_only(GetParam()));
  GpuPoolMemory owned{*driver}, mine{*driver};
  std::vector<std::byte> pattern(kBlock * kBlocks);
  test_support::fill_pattern(pattern, 31);
  owned.upload(pattern);
  test_support::fill_pattern(pattern, 32);
  mine.upload(pattern);
  auto pool = owner.register_pool({owned.region()}, {.name = "kv"});
  auto local = peer.register_pool({mine.region()});
  // Write 128 random blocks with a tag: the owner holds their bytes when the tag arrives.
  const auto written = random_pairs(1, 128);
  auto write = peer.write_blocks(local, written, pool.metadata(), "layer-0");
  ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(write.transport(), GetParam());
  EXPECT_EQ(pool.wait_for_tag("layer-0", 10s).tag, "layer-0");
  EXPECT_EQ(pairs_differ(written, owned.download(), mine.download()), "");
  // Read 128 other random blocks back into the peer.
  const auto read_pairs = random_pairs(2, 128);
  auto read = peer.read_blocks(pool.metadata(), read_pairs, local, "read-0");
  ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(pool.wait_for_tag("read-0", 10s, {}, TagKinds::Reads).tag, "read-0");
  EXPECT_EQ(pairs_differ(read_pairs, owned.download(), mine.download()), "");
  // One large run (every block, in order) each way.
  std::vector<BlockPair> all;
  for (std::uint64_t i = 0; i < kBlocks; ++i) all.push_back({i, i});
  test_support::fill_pattern(pattern, 33);
  mine.upload(pattern);
  auto bulk = peer.write_blocks(local, all, pool.metadata(), "bulk");
  ASSERT_EQ(bulk.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(pool.wait_for_tag("bulk", 10s).tag, "bulk");
  EXPECT_EQ(owned.download(), pattern);
  EXPECT_EQ(pool.peer_faults(), 0u);
}

TEST_P(CudaPool, GpuAndHostPoolsPair) {
  REQUIRE_CUDA();
  Connector owner(transport_only(GetParam())), peer(transport_only(GetParam()));
  GpuPoolMemory device{*driver};
  std::vector<std::byte> host(kBlock * kBlocks), pattern(kBlock * kBlocks);
  test_support::fill_pattern(host, 41);
  test_support::fill_pattern(pattern, 42);
  device.upload(pattern);
  const BlockRegion host_region{host.data(), kBlock, 0, kBlocks, {}};
  const auto pairs = random_pairs(3, 100);
  {  // A GPU owner, a host peer.
    auto pool = owner.register_pool({device.region()});
    auto local = peer.register_pool({host_region});
    auto write = peer.write_blocks(local, pairs, pool.metadata(), "t");
    ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(pool.wait_for_tag("t", 10s).tag, "t");
    EXPECT_EQ(pairs_differ(pairs, device.download(), host), "");
  }
  {  // A host owner, a GPU peer (staged on the peer's side).
    test_support::fill_pattern(pattern, 43);
    device.upload(pattern);
    auto pool = owner.register_pool({host_region});
    auto local = peer.register_pool({device.region()});
    auto write = peer.write_blocks(local, pairs, pool.metadata(), "u");
    ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(pool.wait_for_tag("u", 10s).tag, "u");
    EXPECT_EQ(pairs_differ(pairs, host, device.download()), "");
    test_support::fill_pattern(host, 44);
    auto read = peer.read_blocks(pool.metadata(), pairs, local);
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(pairs_differ(pairs, host, device.download()), "");
  }
}

TEST_P(CudaPool, StaleMetadataAndUnequalBlocksAreRefused) {
  REQUIRE_CUDA();
  Connector owner(transport_only(GetParam())), peer(transport_only(GetParam()));
  GpuPoolMemory owned{*driver}, mine{*driver};
  auto pool = owner.register_pool({owned.region()});
  const auto stale = pool.metadata();
  pool.close();
  auto again = owner.register_pool({owned.region()});
  auto local = peer.register_pool({mine.region()});
  auto write = peer.write_blocks(local, {{0, 0}}, stale, "stale");
  EXPECT_EQ(code_of([&] { (void)write.wait_for_completion(30s); }), ErrorCode::Expired);
  auto small = peer.register_pool({{mine.memory, 4096, 0, 16, Device::parse("cuda:0")}});
  EXPECT_EQ(code_of([&] {
              (void)peer.write_blocks(small, {{0, 0}}, again.metadata());
            }),
            ErrorCode::SizeMismatch);
}

INSTANTIATE_TEST_SUITE_P(Transports, CudaPool, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });
