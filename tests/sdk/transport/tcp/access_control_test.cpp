// A hostile or confused peer speaking the TCP wire protocol directly: every access that does
// not present the right key and token, or leaves the registration, is refused and memory stays
// untouched.
#include <gtest/gtest.h>

#include <cstring>

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

struct AccessControl : ::testing::Test {
  Connector owner{tcp_only()};
  std::vector<std::byte> memory = std::vector<std::byte>(4096, std::byte{0x5a});
  std::vector<std::byte> untouched = memory;
  std::vector<std::byte> payload = std::vector<std::byte>(16, std::byte{0xee});
  std::vector<Descriptor> view{Descriptor(std::span(memory))};
};

}  // namespace

TEST_F(AccessControl, TheRightTokenReads) {
  auto readable = owner.create_readable(view);
  RawStreamPeer peer(readable.metadata());
  peer.send(peer.request(FrameType::ReadRequest, 0, 100, 16));
  auto [code, bytes] = peer.answer();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(bytes, std::vector<std::byte>(16, std::byte{0x5a}));
}

TEST_F(AccessControl, ForgedTokenIsRefused) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  auto forged = peer.request(FrameType::WriteRequest, 0, 0, 16);
  forged.token[3] ^= 1;
  peer.send(forged, payload);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  auto read = peer.request(FrameType::ReadRequest, 0, 0, 16);
  read.token = random_id();
  peer.send(read);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(memory, untouched);
  EXPECT_EQ(writable.status(), OperationStatus::Initialized);
}

TEST_F(AccessControl, WrongKeyIsNotFound) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  auto request = peer.request(FrameType::WriteRequest, 0, 0, 16);
  request.key = random_id();
  peer.send(request, payload);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::NotFound));
  EXPECT_EQ(memory, untouched);
}

TEST_F(AccessControl, OutOfBoundsIsRefused) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  struct Case {
    std::uint32_t index;
    std::uint64_t offset;
  };
  for (auto [index, offset] :
       {Case{0, 4090}, Case{0, 4096}, Case{1, 0}, Case{0, ~0ull - 4}, Case{7, 0}}) {
    peer.send(peer.request(FrameType::WriteRequest, index, offset, 16), payload);
    EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied)) << index << " " << offset;
  }
  // Lengths that wrap around or are empty.
  for (auto length : {~0ull - 4, 0ull}) {
    peer.send(peer.request(FrameType::ReadRequest, 0, 8, length));
    EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied)) << length;
  }
  // A read past the end is refused just the same.
  peer.send(peer.request(FrameType::ReadRequest, 0, 4000, 200));
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(memory, untouched);
}

TEST_F(AccessControl, LeastPrivilegeReadableCannotBeWritten) {
  auto readable = owner.create_readable(view);
  RawStreamPeer peer(readable.metadata());
  peer.send(peer.request(FrameType::WriteRequest, 0, 0, 16), payload);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(memory, untouched);
  auto writable = owner.create_writable(view);
  RawStreamPeer writer(writable.metadata());
  writer.send(writer.request(FrameType::ReadRequest, 0, 0, 16));
  EXPECT_EQ(writer.answer().first, wire_code(ErrorCode::AccessDenied));
}

TEST_F(AccessControl, AccessAfterCancelIsRefused) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  writable.cancel();
  peer.send(peer.request(FrameType::WriteRequest, 0, 0, 16), payload);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::NotFound));
  EXPECT_EQ(memory, untouched);
}

TEST_F(AccessControl, AccessAfterCompletionIsRefused) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  // Every byte: a write of part of it would not complete it.
  const std::vector<std::byte> whole(memory.size(), std::byte{0xee});
  peer.send(peer.request(FrameType::WriteRequest, 0, 0, whole.size()), whole);
  EXPECT_EQ(peer.answer().first, 0);
  peer.send(peer.request(FrameType::Notice, 0, 0, 0));
  EXPECT_EQ(peer.answer().first, 0);
  EXPECT_EQ(writable.wait_for_completion(2s), OperationStatus::Complete);
  auto after = memory;
  peer.send(peer.request(FrameType::WriteRequest, 0, 100, 16), payload);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::NotFound));
  EXPECT_EQ(memory, after);
  // A second completion notice changes nothing either.
  peer.send(peer.request(FrameType::Notice, 0, 0, 0));
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::NotFound));
}

TEST_F(AccessControl, ForgedCompletionNoticeIsRefused) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  auto notice = peer.request(FrameType::Notice, 0, 0, 0);
  notice.token = random_id();
  peer.send(notice);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::AccessDenied));
  EXPECT_EQ(writable.status(), OperationStatus::Initialized);
}

TEST_F(AccessControl, ErrorNoticeReachesThePassiveSide) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  auto notice = peer.request(FrameType::Notice, 0, 0, 0);
  notice.code = wire_code(ErrorCode::Transport);
  const std::string reason = "disk on fire";
  std::vector<std::byte> text(reason.size());
  std::memcpy(text.data(), reason.data(), reason.size());
  notice.length = text.size();
  peer.send(notice, text);
  EXPECT_EQ(peer.answer().first, 0);
  try {
    writable.wait_for_completion(2s);
    FAIL() << "the passive side did not learn of the failure";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Transport);
    EXPECT_NE(std::string(error.what()).find("disk on fire"), std::string::npos);
  }
}

TEST_F(AccessControl, GarbageClosesTheConnectionWithoutHarm) {
  auto writable = owner.create_writable(view);
  RawStreamPeer peer(writable.metadata());
  FrameHeader garbage;
  garbage.magic = 0xdeadbeef;
  peer.send(garbage);
  EXPECT_TRUE(peer.hung_up()) << "the server answered garbage instead of hanging up";
  EXPECT_EQ(memory, untouched);
  // And keeps serving others.
  RawStreamPeer other(writable.metadata());
  other.send(other.request(FrameType::WriteRequest, 0, 0, 16), payload);
  EXPECT_EQ(other.answer().first, 0);
}

TEST_F(AccessControl, CrossMemoryRequestsNeedAKnownLocalProcess) {
  auto readable = owner.create_readable(view);
  RawStreamPeer peer(readable.metadata());  // over TCP: the kernel cannot vouch for our process
  auto request = peer.request(FrameType::ReadRequest, 0, 0, 16);
  request.flags = frame_flags::kCrossMemory;
  request.peer_address = reinterpret_cast<std::uintptr_t>(payload.data());
  peer.send(request);
  EXPECT_EQ(peer.answer().first, wire_code(ErrorCode::Protocol));
  EXPECT_EQ(payload, std::vector<std::byte>(16, std::byte{0xee}));
}

// Issue 23, finding 9: a refusal's text carried its code's prefix, and the reader's error added
// it again: "not found: the passive side refused: not found: no live operation ...". The code
// travels apart, so the text says it once.
TEST(RefusalText, NamesItsCodeOnce) {
  Connector owner{tcp_only()}, reader{tcp_only()};
  std::vector<std::byte> memory(4096), target(4096);
  auto writable = owner.create_writable({Descriptor(std::span(memory))});
  const auto metadata = writable.metadata();
  writable.cancel();
  auto write = reader.begin_write({Descriptor(std::span(target))}, metadata);
  std::string message;
  try {
    write.wait_for_completion(5s);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    message = error.what();
  }
  ASSERT_FALSE(message.empty()) << "the write went through";
  EXPECT_EQ(message.find("not found"), message.rfind("not found")) << message;
  EXPECT_NE(message.find("no live operation"), std::string::npos) << message;
}
