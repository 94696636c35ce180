// Piece requests (many blocks in one request, the stream transports' KV-cache path): the codec's
// limits, and a hostile or confused peer sending them raw over TCP. Every piece is checked
// against the registration before any byte moves; a malformed list closes the connection.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "memwire/memwire.hpp"
#include "support/raw_stream_peer.hpp"
#include "support/tcp_only.hpp"
#include "transport/stream/frame.hpp"
#include "util/ids.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> as_bytes(const std::vector<FramePiece>& pieces) {
  std::vector<std::byte> bytes(pieces.size() * sizeof(FramePiece));
  if (!pieces.empty()) std::memcpy(bytes.data(), pieces.data(), bytes.size());
  return bytes;
}

std::uint64_t total_length(const std::vector<FramePiece>& pieces) {
  return std::accumulate(
      pieces.begin(), pieces.end(), std::uint64_t{0},
      [](std::uint64_t sum, const FramePiece& piece) { return sum + piece.length; });
}

// Two descriptors of distinct bytes: 4096 and 64.
struct PieceRequests : ::testing::Test {
  Connector owner{tcp_only()};
  std::vector<std::byte> memory = [] {
    std::vector<std::byte> bytes(4096 + 64);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 7 + 1);
    return bytes;
  }();
  std::vector<std::byte> untouched = memory;
  std::vector<Descriptor> view{Descriptor(memory.data(), 4096),
                               Descriptor(memory.data() + 4096, 64)};

  // A piece request; a write carries `data` after the list.
  void send_pieces(RawStreamPeer& peer, FrameType type, const std::vector<FramePiece>& pieces,
                   const std::vector<std::byte>& data = {}) {
    auto header =
        peer.request(type, static_cast<std::uint32_t>(pieces.size()), 0, total_length(pieces));
    auto payload = as_bytes(pieces);
    payload.insert(payload.end(), data.begin(), data.end());
    peer.send(header, payload);
  }

  std::vector<std::byte> bytes_at(std::size_t at, std::size_t length) const {
    return {untouched.begin() + static_cast<std::ptrdiff_t>(at),
            untouched.begin() + static_cast<std::ptrdiff_t>(at + length)};
  }
};

}  // namespace

TEST(PieceCodec, CountIsLimited) {
  FrameHeader header;
  for (std::uint32_t count : {0u, kMaxFramePieces + 1, ~0u}) {
    header.index = count;
    EXPECT_EQ(piece_list_bytes(header), 0u) << count;
  }
  header.index = 1;
  EXPECT_EQ(piece_list_bytes(header), sizeof(FramePiece));
  header.index = kMaxFramePieces;
  EXPECT_EQ(piece_list_bytes(header), kMaxFramePieces * sizeof(FramePiece));
}

TEST(PieceCodec, LengthsMustAddUpWithoutWrapping) {
  FrameHeader header;
  header.length = 30;
  std::vector<FramePiece> pieces{{0, 0, 0, 10, 0}, {1, 0, 5, 20, 0}};
  EXPECT_TRUE(pieces_add_up(header, pieces));
  header.length = 31;
  EXPECT_FALSE(pieces_add_up(header, pieces));
  header.length = 29;
  EXPECT_FALSE(pieces_add_up(header, pieces));
  // Two lengths whose sum wraps around to the header's.
  header.length = 30;
  pieces = {{0, 0, 0, ~0ull, 0}, {0, 0, 0, 31, 0}};
  EXPECT_FALSE(pieces_add_up(header, pieces));
}

TEST_F(PieceRequests, ReadReturnsEveryPieceInOrder) {
  auto readable = owner.create_readable(view);
  RawStreamPeer peer(readable.metadata());
  // Out of order, across both descriptors, overlapping (allowed: bounds are what protect).
  std::vector<FramePiece> pieces{
      {1, 0, 60, 4, 0}, {0, 0, 100, 16, 0}, {0, 0, 108, 16, 0}, {0, 0, 0, 4096, 0}};
  send_pieces(peer, FrameType::ReadPiecesRequest, pieces);
  auto [code, payload] = peer.answer();
  ASSERT_EQ(code, 0);
  std::vector<std::byte> expected;
  for (const auto& piece : pieces) {
    auto part = bytes_at(piece.index * 4096 + piece.offset, piece.length);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  EXPECT_EQ(payload, expected);
}

TEST_F(PieceRequests, WriteLandsEveryPieceAndLaterOverlapsWin) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  std::vector<FramePiece> pieces{{1, 0, 0, 8, 0}, {0, 0, 10, 8, 0}, {0, 0, 14, 8, 0}};
  std::vector<std::byte> data(24);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::byte(0xa0 + i);
  send_pieces(peer, FrameType::WritePiecesRequest, pieces, data);
  EXPECT_EQ(peer.answer().first, 0);
  auto expected = untouched;
  std::memcpy(expected.data() + 4096, data.data(), 8);
  std::memcpy(expected.data() + 10, data.data() + 8, 8);
  std::memcpy(expected.data() + 14, data.data() + 16, 8);  // over the second piece's tail
  EXPECT_EQ(memory, expected);
}

TEST_F(PieceRequests, OnePieceOutOfBoundsRefusesTheWholeRequest) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  const std::vector<std::vector<FramePiece>> hostile{
      {{0, 0, 0, 16, 0}, {1, 0, 60, 16, 0}},         // past the end of the second
      {{0, 0, 0, 16, 0}, {2, 0, 0, 16, 0}},          // no third descriptor
      {{0, 0, 0, 16, 0}, {0, 0, ~0ull - 4, 16, 0}},  // an offset that wraps
      {{0, 0, 0, 16, 0}, {0, 0, 0, 0, 0}},           // an empty piece
  };
  for (const auto& pieces : hostile) {
    send_pieces(peer, FrameType::WritePiecesRequest, pieces,
                std::vector<std::byte>(total_length(pieces), std::byte{0xee}));
    EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
    EXPECT_EQ(memory, untouched) << "a piece was written before the last one was checked";
  }
  // The connection still serves: the framing survived every refusal.
  send_pieces(peer, FrameType::WritePiecesRequest, {{0, 0, 0, 4, 0}},
              std::vector<std::byte>(4, std::byte{0xee}));
  EXPECT_EQ(peer.answer().first, 0);
}

TEST_F(PieceRequests, TheRightKeyTokenAndKindAreNeeded) {
  auto readable = owner.create_readable(view);
  RawStreamPeer peer(readable.metadata());
  const std::vector<FramePiece> pieces{{0, 0, 0, 16, 0}, {1, 0, 0, 16, 0}};
  auto header = peer.request(FrameType::ReadPiecesRequest, 2, 0, 32);
  header.token = random_id();
  peer.send(header, as_bytes(pieces));
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  header = peer.request(FrameType::ReadPiecesRequest, 2, 0, 32);
  header.key = random_id();
  peer.send(header, as_bytes(pieces));
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::NotFound));
  // A readable cannot be written to, piece by piece either.
  send_pieces(peer, FrameType::WritePiecesRequest, pieces,
              std::vector<std::byte>(32, std::byte{0xee}));
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(memory, untouched);
}

TEST_F(PieceRequests, TooManyOrNoPiecesCloseTheConnection) {
  auto readable = owner.create_readable(view);
  for (std::uint32_t count : {kMaxFramePieces + 1, 0u, ~0u}) {
    RawStreamPeer peer(readable.metadata());
    std::vector<FramePiece> pieces(std::min<std::uint32_t>(count, kMaxFramePieces + 1),
                                   FramePiece{0, 0, 0, 1, 0});
    auto header = peer.request(FrameType::ReadPiecesRequest, count, 0, total_length(pieces));
    peer.send(header, as_bytes(pieces));
    EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::Protocol)) << count;
    EXPECT_TRUE(peer.hung_up()) << count;
  }
  // A full list is fine.
  RawStreamPeer peer(readable.metadata());
  std::vector<FramePiece> pieces(kMaxFramePieces, FramePiece{0, 0, 0, 1, 0});
  send_pieces(peer, FrameType::ReadPiecesRequest, pieces);
  auto [code, payload] = peer.answer();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(payload, std::vector<std::byte>(kMaxFramePieces, untouched[0]));
}

TEST_F(PieceRequests, LengthsThatDoNotAddUpCloseTheConnection) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  const std::vector<FramePiece> pieces{{0, 0, 0, 16, 0}, {1, 0, 0, 16, 0}};
  peer.send(peer.request(FrameType::WritePiecesRequest, 2, 0, 40),
            as_bytes(pieces));  // says 40, the pieces say 32: where the next frame starts is lost
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::Protocol));
  EXPECT_TRUE(peer.hung_up());
  EXPECT_EQ(memory, untouched);
}

TEST_F(PieceRequests, CrossMemoryPiecesNeedAKnownLocalProcess) {
  auto readable = owner.create_readable(view);
  RawStreamPeer peer(readable.metadata());  // over TCP: the kernel cannot vouch for our process
  std::vector<std::byte> landing(32, std::byte{0xee});
  const std::vector<FramePiece> pieces{
      {0, 0, 0, 16, reinterpret_cast<std::uintptr_t>(landing.data())},
      {1, 0, 0, 16, reinterpret_cast<std::uintptr_t>(landing.data() + 16)}};
  auto header = peer.request(FrameType::ReadPiecesRequest, 2, 0, 32);
  header.flags = frame_flags::kCrossMemory;
  peer.send(header, as_bytes(pieces));
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::Protocol));
  EXPECT_EQ(landing, std::vector<std::byte>(32, std::byte{0xee}));
}
