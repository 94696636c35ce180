// A hostile owner, played over tcp against a real reader: an answer the reader did not ask for
// (a flag, a request id, a type) is a protocol error that closes its connection. A read never
// reports success with its bytes not here, and no connection stays in the pool stuck reading
// a bogus payload.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/fake_tcp_owner.hpp"
#include "support/operation_waits.hpp"
#include "transport/stream/frame.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;
using memwire::test_support::failure_code;
using namespace memwire::test_support;

namespace {

using HostileOwner = FakeOwnerReads;

}  // namespace

// Over tcp nothing is cross-memory: an answer that says the owner copied the bytes into the
// reader's memory itself cannot be true, and must not complete the read.
TEST_F(HostileOwner, ACrossMemoryAnswerToASocketReadIsAProtocolError) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    auto header = answer_header(FrameType::ReadResponse, request.request_id, 0);
    header.flags = frame_flags::kCrossMemory;
    send_frame(socket, header);
  });
  targets.reserve(1);
  auto read = begin_read(fake);
  EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol);
  EXPECT_EQ(read.status(), OperationStatus::Errored);
  EXPECT_TRUE(fake.closed_by_reader(0, 5s)) << "the connection outlived the protocol error";
}

// A mapping was asked for by none of the reader's requests: the answer that offers one breaks
// the connection, not just the read.
TEST_F(HostileOwner, AMappedAnswerNobodyAskedForClosesTheConnection) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    auto header =
        answer_header(FrameType::ReadResponse, request.request_id, sizeof(SharedLocation));
    header.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
    const std::vector<std::byte> location(sizeof(SharedLocation));
    send_frame(socket, header, location);
  });
  targets.reserve(1);
  auto read = begin_read(fake);
  EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol);
  EXPECT_TRUE(fake.closed_by_reader(0, 5s)) << "the connection outlived the protocol error";
}

// A read request is answered by a ReadResponse: a write's or a notice's answer to it would end
// the read with its bytes not here.
TEST_F(HostileOwner, AReadAnsweredByAnotherTypeOfAnswerIsAProtocolError) {
  FakeTcpOwner fake([](int connection, int socket) {
    auto request = read_request(socket);
    const auto type = connection == 0 ? FrameType::WriteResponse : FrameType::NoticeResponse;
    send_frame(socket, answer_header(type, request.request_id, 0));
  });
  targets.reserve(2);
  for (const char* answered_by : {"a WriteResponse", "a NoticeResponse"}) {
    auto read = begin_read(fake);
    EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol) << answered_by;
    EXPECT_EQ(read.status(), OperationStatus::Errored) << answered_by;
  }
  EXPECT_TRUE(filled_with(targets[0], std::byte{0}));
}

// An answer to a request id the reader never used, claiming 2^40 bytes: skipping them would hold
// the connection forever (and every read after it, the answers among those bytes). It closes
// instead, and the next read dials a new connection.
TEST_F(HostileOwner, AnAnswerToAnUnknownRequestClosesItsConnection) {
  FakeTcpOwner fake([](int connection, int socket) {
    auto request = read_request(socket);
    if (request.request_id == 0) return;
    answer(socket, request, std::byte(0x11 + connection));
    if (connection == 0)
      send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id + 1000,
                                       std::uint64_t{1} << 40));
  });
  targets.reserve(2);
  auto first = begin_read(fake);
  ASSERT_EQ(settled(first, 5s), OperationStatus::Complete);
  EXPECT_TRUE(filled_with(targets[0], std::byte{0x11}));
  EXPECT_TRUE(fake.closed_by_reader(0, 5s)) << "the reader went on reading the bogus payload";
  auto second = begin_read(fake);
  EXPECT_EQ(settled(second, 2s), OperationStatus::Complete);
  EXPECT_TRUE(filled_with(targets[1], std::byte{0x12}));
}

// The same answer ahead of the real one: the read waiting on the connection fails at once with
// a Protocol error, instead of waiting for an answer that would be skipped with the rest.
TEST_F(HostileOwner, AnAnswerToAnUnknownRequestFailsTheReadsWaitingOnItsConnection) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    if (request.request_id == 0) return;
    send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id + 1000,
                                     std::uint64_t{1} << 40));
    answer(socket, request, std::byte{0x21});
  });
  targets.reserve(1);
  auto read = begin_read(fake);
  EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol);
  EXPECT_EQ(read.status(), OperationStatus::Errored);
}

// Failure notices carry no request id, so the answer to one comes with id 0: a text, no more,
// that is dropped. A longer one is no such answer.
TEST_F(HostileOwner, OnlyAShortNoticeAnswerMayComeWithoutARequest) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    if (request.request_id == 0) return;
    const std::string text = "no such operation";
    auto refusal = answer_header(FrameType::NoticeResponse, 0, text.size());
    refusal.code = wire_code(ErrorCode::NotFound);
    send_frame(socket, refusal, std::as_bytes(std::span(text)));
    answer(socket, request, std::byte{0x31});

    request = read_request(socket);
    if (request.request_id == 0) return;
    const std::vector<std::byte> long_payload(FrameHeader::kMaxText + 1, std::byte{0x7f});
    send_frame(socket, answer_header(FrameType::NoticeResponse, 0, long_payload.size()),
               long_payload);
    answer(socket, request, std::byte{0x32});
  });
  targets.reserve(2);
  auto first = begin_read(fake);
  ASSERT_EQ(settled(first, 5s), OperationStatus::Complete);
  EXPECT_TRUE(filled_with(targets[0], std::byte{0x31}));
  auto second = begin_read(fake);
  EXPECT_EQ(failure_code(second, 5s), ErrorCode::Protocol);
}

// Issue 36, item 8: an owner that stalls in the middle of a read's answer. Cancelling the read
// stops the bytes at once: cancel() does not wait for the owner, nothing lands in the buffer
// after it returns, and the connection, its framing intact, serves the next read.
TEST_F(HostileOwner, ACancelledReadTakesNoMoreBytesAndWaitsForNoStalledOwner) {
  constexpr std::size_t kBig = 1u << 20, kFirst = 64u << 10;
  std::promise<void> go, first_sent;
  auto went = go.get_future().share();
  FakeTcpOwner fake([&, went](int connection, int socket) {
    if (connection != 0) return;
    auto request = read_request(socket);
    const std::vector<std::byte> first(kFirst, std::byte{0xAA}),
        rest(kBig - kFirst, std::byte{0xBB});
    send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id, kBig), first);
    first_sent.set_value();
    if (went.wait_for(20s) != std::future_status::ready) return;
    send_all_bytes(socket, rest);
    // The cancelled read's failure notice comes first: taken and left unanswered.
    auto next = read_request(socket);
    while (next.type == FrameType::Notice) {
      std::string text(next.length, '\0');
      if (next.length > FrameHeader::kMaxText || !receive_all(socket, text.data(), text.size()))
        return;
      next = read_request(socket);
    }
    answer(socket, next, std::byte{0x22});
  });
  std::vector<std::byte> big_source(kBig, std::byte{1}), big(kBig, std::byte{0});
  auto readable = owner.create_readable({Descriptor(std::span(big_source))});
  auto read = reader.begin_read(pointed_at(readable.metadata(), fake.address()),
                                {Descriptor(std::span(big))});
  // The buffer is the reader's to write until the cancel: no look at it before. 200 ms for the
  // first part to land; the check after the cancel says whether it did.
  ASSERT_EQ(first_sent.get_future().wait_for(10s), std::future_status::ready);
  std::this_thread::sleep_for(200ms);
  const auto began = std::chrono::steady_clock::now();
  read.cancel();
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_LT(took, 1s) << "cancel waited for the stalled owner";
  ASSERT_EQ(big[kFirst - 1], std::byte{0xAA}) << "the cancel came before the answer began";
  go.set_value();
  targets.reserve(1);
  auto next = begin_read(fake);  // the same connection: connections_per_peer is 1
  EXPECT_EQ(settled(next, 10s), OperationStatus::Complete) << next.error_message();
  EXPECT_TRUE(filled_with(targets.back(), std::byte{0x22}));
  EXPECT_EQ(std::count(big.begin(), big.end(), std::byte{0xBB}), 0)
      << "bytes landed in the buffer of a cancelled read";
}
