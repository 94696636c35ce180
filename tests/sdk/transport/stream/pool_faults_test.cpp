// Pool::peer_faults() counts every frame against the protocol that names the pool, as its
// documentation says (a tag with no admitted transfer, a second tag, a PoolEnd presenting
// another token, a malformed request): issue 51 found 2 of 14 such frames counted. Each frame
// here goes on a connection of its own (a fault closes it), from a raw peer over tcp; shm
// carries the same frames to the same passive side.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/raw_stream_peer.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;
using detail::FrameHeader;
using detail::FramePiece;
using detail::FrameType;
using detail::PoolFrameHeader;
namespace frame_flags = detail::frame_flags;

namespace {

constexpr std::size_t kBlock = 4096;

ConnectorOptions tcp_only() {
  ConnectorOptions options;
  options.transports = {"tcp"};
  return options;
}

std::vector<std::byte> bytes(std::size_t n) { return std::vector<std::byte>(n, std::byte{'w'}); }

// A pool request header of `pool`'s, as RawStreamPeer::pool_request makes it, to be bent.
PoolFrameHeader pool_header(const PoolMetadata& pool, FrameType type, std::uint32_t pieces,
                            std::uint64_t length, std::uint32_t tag_bytes) {
  PoolFrameHeader header;
  header.type = type;
  header.request_id = 42;
  header.piece_count = pieces;
  header.generation = static_cast<std::uint32_t>(pool.generation());
  header.transfer = 1;
  header.length = length;
  header.tag_bytes = tag_bytes;
  header.key = *parse_id(pool.key());
  header.token = *parse_id(pool.token());
  return header;
}

std::vector<std::byte> piece_list(const std::vector<FramePiece>& pieces) {
  std::vector<std::byte> list(pieces.size() * sizeof(FramePiece));
  std::memcpy(list.data(), pieces.data(), list.size());
  return list;
}

// Whether the owner closes the connection (after what answers it sends) within 5 s.
bool closed_by_owner(RawStreamPeer& raw) {
  timeval timeout{5, 0};
  ::setsockopt(raw.socket(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char buffer[4096];
  for (;;) {
    const auto n = ::recv(raw.socket(), buffer, sizeof buffer, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

struct Case {
  std::string what;
  // Sends the frame on a connection that said Hello (and, for some, opened a transfer first).
  std::function<void(RawStreamPeer&)> send;
};

TEST(PoolFaults, EveryFrameAgainstTheProtocolNamingThePoolIsCounted) {
  Connector owner(tcp_only());
  std::vector<std::byte> memory(4 * kBlock);
  auto pool = owner.register_pool({{memory.data(), kBlock, 0, 4, {}}});
  const auto metadata = pool.metadata();
  const auto granted = pool.metadata_for("someone-else");
  const FramePiece block{0, 0, 0, kBlock};
  // A transfer that delivered its tag on this connection (transfer 1, tag "t").
  const auto delivered = [](RawStreamPeer& raw) {
    raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, kBlock}}, "t", 0, bytes(kBlock));
    ASSERT_EQ(raw.answer().first, 0);
    raw.pool_end(1);
    ASSERT_EQ(raw.answer().first, 0);
  };
  const std::vector<Case> cases{
      {"a PoolEnd with no admitted transfer", [](RawStreamPeer& raw) { raw.pool_end(17); }},
      {"a second tag for a transfer",
       [&](RawStreamPeer& raw) {
         delivered(raw);
         raw.pool_end(1);
       }},
      {"a PoolEnd presenting another peer's token",
       [&](RawStreamPeer& raw) {
         raw.pool_request(FrameType::PoolWriteRequest, 2, {block}, "u", 0, bytes(kBlock));
         ASSERT_EQ(raw.answer().first, 0);
         auto end = pool_header(metadata, FrameType::PoolEnd, 0, 0, 0);
         end.transfer = 2;
         end.token = *parse_id(granted.token());
         raw.send(detail::as_frame(end));
       }},
      {"a request of a transfer after its end",
       [&](RawStreamPeer& raw) {
         delivered(raw);
         raw.pool_request(FrameType::PoolWriteRequest, 1, {block}, "t", 0, bytes(kBlock));
       }},
      {"a request of no pieces",
       [&](RawStreamPeer& raw) {
         raw.send(detail::as_frame(pool_header(metadata, FrameType::PoolReadRequest, 0, 0, 0)));
       }},
      {"a request of more pieces than a frame may hold",
       [&](RawStreamPeer& raw) {
         raw.send(detail::as_frame(pool_header(metadata, FrameType::PoolReadRequest,
                                               detail::kMaxFramePieces + 1, kBlock, 0)));
       }},
      {"a tag longer than a tag may be",
       [&](RawStreamPeer& raw) {
         raw.send(detail::as_frame(pool_header(metadata, FrameType::PoolReadRequest, 1, kBlock,
                                               detail::kMaxFrameTag + 1)));
       }},
      {"pieces that do not add up to the request's length",
       [&](RawStreamPeer& raw) {
         raw.send(
             detail::as_frame(pool_header(metadata, FrameType::PoolReadRequest, 1, 2 * kBlock, 0)),
             piece_list({block}));
       }},
      {"a read that says it ends its transfer",
       [&](RawStreamPeer& raw) {
         raw.pool_request(FrameType::PoolReadRequest, 1, {block}, "t",
                          frame_flags::kLastOfTransfer);
       }},
      {"an untagged write that says it ends its transfer",
       [&](RawStreamPeer& raw) {
         raw.pool_request(FrameType::PoolWriteRequest, 1, {block}, "", frame_flags::kLastOfTransfer,
                          bytes(kBlock));
       }},
      {"a tag holding a NUL byte",
       [&](RawStreamPeer& raw) {
         raw.pool_request(FrameType::PoolReadRequest, 1, {block}, std::string("a\0b", 3));
       }},
      {"a CUDA IPC request that is not cross-memory",
       [&](RawStreamPeer& raw) {
         auto header = pool_header(metadata, FrameType::PoolReadRequest, 1, kBlock, 0);
         header.version = detail::kCudaIpcVersion;
         header.flags = frame_flags::kCudaIpc;
         header.ipc_allocations = 1;
         auto payload = piece_list({block});
         payload.resize(payload.size() + sizeof(detail::FrameIpcAllocation));
         raw.send(detail::as_frame(header), payload);
       }},
      {"a PoolEnd whose text is longer than a text may be",
       [&](RawStreamPeer& raw) {
         auto end = pool_header(metadata, FrameType::PoolEnd, 0, FrameHeader::kMaxText + 1, 0);
         end.code = 1;
         raw.send(detail::as_frame(end));
       }},
      {"a frame of another version",
       [&](RawStreamPeer& raw) {
         auto header = pool_header(metadata, FrameType::PoolReadRequest, 1, kBlock, 0);
         header.version = FrameHeader::kVersion + 7;
         raw.send(detail::as_frame(header), piece_list({block}));
       }},
      {"a frame of an unknown type",
       [&](RawStreamPeer& raw) {
         auto header = pool_header(metadata, FrameType::PoolReadRequest, 1, kBlock, 0);
         header.type = static_cast<FrameType>(200);
         raw.send(detail::as_frame(header));
       }},
      {"an answer sent to the owner",
       [&](RawStreamPeer& raw) {
         auto header = pool_header(metadata, FrameType::ReadResponse, 0, 0, 0);
         raw.send(detail::as_frame(header));
       }},
  };
  std::uint64_t expected = 0;
  for (const auto& fault : cases) {
    SCOPED_TRACE(fault.what);
    RawStreamPeer raw(metadata);
    raw.hello("faulty");
    fault.send(raw);
    EXPECT_TRUE(closed_by_owner(raw)) << "a fault must close its connection";
    ++expected;
    EXPECT_EQ(pool.peer_faults(), expected);
  }
  EXPECT_EQ(pool.peer_faults(), cases.size());
  EXPECT_EQ(pool.refusals(), 0u) << "faults are not refusals";
}

// A well-formed request for what the pool forbids is a refusal, not a fault: its connection goes
// on (pool_trust_conformance_test.cpp has more).
TEST(PoolFaults, ARefusalIsNoFault) {
  Connector owner(tcp_only());
  std::vector<std::byte> memory(4 * kBlock);
  PoolOptions read_only;
  read_only.remote_write = false;
  auto pool = owner.register_pool({{memory.data(), kBlock, 0, 4, {}}}, read_only);
  RawStreamPeer raw(pool.metadata());
  raw.hello("writer");
  raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, kBlock}}, "", 0, bytes(kBlock));
  EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(pool.refusals(), 1u);
  EXPECT_EQ(pool.peer_faults(), 0u);
}

}  // namespace
