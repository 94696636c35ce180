// The stream transports' frame codec (sdk/src/transport/stream/frame.hpp) as StreamConnection
// speaks it: headers and payloads cross a real socket pair intact and in order; a garbled,
// truncated or oversized frame closes the connection with a reason that says what was wrong,
// and nothing of it reaches the handler.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/access_gate.hpp"
#include "memwire/error.hpp"
#include "support/raw_connection_pair.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "transport/stream/stream_connection.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

// What one connection's reader saw: each frame with its payload, and how the connection ended.
struct Received {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<FrameHeader, std::string>> frames;
  std::optional<std::string> closed;  // the Error's text

  bool wait(std::size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return frames.size() >= count; });
  }
  std::string wait_closed() {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, 10s, [&] { return closed.has_value(); });
    return closed.value_or("(not closed within 10 s)");
  }
};

// Takes every frame's payload as text (a ReadRequest carries none); the codec's own checks
// decide what arrives.
class Recorder final : public FrameHandler {
 public:
  explicit Recorder(std::shared_ptr<Received> received) : received_(std::move(received)) {}
  void on_frame(StreamConnection& connection, const FrameHeader& header) override {
    std::string payload;
    if (header.type != FrameType::ReadRequest) {
      auto text = connection.receive_text(header.length);
      if (!text) return;
      payload = std::move(*text);
    }
    std::lock_guard lock(received_->mutex);
    received_->frames.emplace_back(header, std::move(payload));
    received_->changed.notify_all();
  }
  void on_closed(StreamConnection&, const Error& reason) override {
    std::lock_guard lock(received_->mutex);
    received_->closed = reason.what();
    received_->changed.notify_all();
  }

 private:
  std::shared_ptr<Received> received_;
};

// A connection reading one end of a socket pair; the test holds the other end raw.
class FrameCodec : public ::testing::Test {
 protected:
  void send_raw(const void* data, std::size_t length) {
    iovec part{const_cast<void*>(data), length};
    ASSERT_TRUE(send_all(pair_.raw.get(), &part, 1));
  }
  void send_raw(const FrameHeader& header, const std::string& payload = {}) {
    send_raw(&header, sizeof header);
    if (!payload.empty()) send_raw(payload.data(), payload.size());
  }
  std::pair<FrameHeader, std::string> receive_raw(std::size_t payload) {
    return pair_.receive_raw(payload);
  }
  std::vector<std::pair<FrameHeader, std::string>> frames() {
    std::lock_guard lock(received_->mutex);
    return received_->frames;
  }

  std::shared_ptr<Received> received_ = std::make_shared<Received>();
  test_support::RawConnectionPair pair_{std::make_unique<Recorder>(received_)};
  std::shared_ptr<StreamConnection>& connection_ = pair_.connection;
};

FrameHeader full_header(FrameType type) {
  FrameHeader header;
  header.type = type;
  header.code = wire_code(ErrorCode::Cancelled);
  header.flags = frame_flags::kCrossMemory | frame_flags::kCompletes;
  header.index = 0xa1b2c3d4;
  header.request_id = 0x0102030405060708;
  header.offset = 0x1122334455667788;
  header.peer_address = 0x7f00deadbeef;
  header.key = random_id();
  header.token = random_id();
  return header;
}

bool same_bytes(const FrameHeader& a, const FrameHeader& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Peers of other builds read these bytes: the layout is the protocol.
TEST(FrameLayout, FieldsSitWhereTheWireFormatSays) {
  EXPECT_EQ(sizeof(FrameHeader), 80u);
  EXPECT_EQ(offsetof(FrameHeader, magic), 0u);
  EXPECT_EQ(offsetof(FrameHeader, version), 4u);
  EXPECT_EQ(offsetof(FrameHeader, type), 5u);
  EXPECT_EQ(offsetof(FrameHeader, code), 6u);
  EXPECT_EQ(offsetof(FrameHeader, flags), 7u);
  EXPECT_EQ(offsetof(FrameHeader, index), 8u);
  EXPECT_EQ(offsetof(FrameHeader, request_id), 16u);
  EXPECT_EQ(offsetof(FrameHeader, offset), 24u);
  EXPECT_EQ(offsetof(FrameHeader, length), 32u);
  EXPECT_EQ(offsetof(FrameHeader, peer_address), 40u);
  EXPECT_EQ(offsetof(FrameHeader, key), 48u);
  EXPECT_EQ(offsetof(FrameHeader, token), 64u);
  const FrameHeader fresh;
  const unsigned char magic[4] = {'M', 'M', 'W', 'R'};
  EXPECT_EQ(std::memcmp(&fresh, magic, 4), 0);
  EXPECT_EQ(fresh.version, 1);
}

TEST(FrameLayout, HeaderChecksNameWhatIsWrong) {
  for (auto type :
       {FrameType::Hello, FrameType::ReadRequest, FrameType::ReadResponse, FrameType::WriteRequest,
        FrameType::WriteResponse, FrameType::Notice, FrameType::NoticeResponse,
        FrameType::HelloResponse, FrameType::ReadPiecesRequest, FrameType::WritePiecesRequest}) {
    FrameHeader header;
    header.type = type;
    EXPECT_EQ(frame_header_problem(header), std::nullopt) << static_cast<int>(type);
  }
  FrameHeader header;
  header.type = FrameType::Notice;
  header.magic = 0x50545448;  // "HTTP"
  EXPECT_EQ(frame_header_problem(header), "not a memwire frame (magic 0x50545448)");
  header = {};
  header.type = FrameType::Notice;
  header.version = 2;
  EXPECT_EQ(frame_header_problem(header), "frame version 2, this build speaks 1");
  header = {};
  EXPECT_EQ(frame_header_problem(header), "unknown frame type 0");
  header.type = static_cast<FrameType>(static_cast<unsigned>(kLastFrameType) + 1);
  EXPECT_EQ(frame_header_problem(header), "unknown frame type 14");
  EXPECT_EQ(text_payload_problem(FrameHeader::kMaxText), std::nullopt);
  EXPECT_EQ(text_payload_problem(FrameHeader::kMaxText + 1),
            "text payload of 4097 bytes (at most 4096)");
}

// Every header field arrives as sent; the text payload arrives whole, its length filled in.
TEST_F(FrameCodec, HeadersAndTextRoundTripInOrder) {
  std::vector<FrameHeader> sent;
  for (int i = 0; i < 50; ++i) {
    OutFrame frame;
    frame.header = full_header(i % 2 == 0 ? FrameType::Notice : FrameType::ReadRequest);
    frame.header.request_id = static_cast<std::uint64_t>(i);
    if (frame.header.type == FrameType::Notice) {
      frame.text = "reason " + std::to_string(i);
    } else {
      frame.header.length = 1 << 20;  // a read request names the bytes it wants, carries none
    }
    sent.push_back(frame.header);
    if (!frame.text.empty()) sent.back().length = frame.text.size();
    ASSERT_TRUE(connection_->send(std::move(frame)));
  }
  // Straight from the connection's writer to the raw end, byte for byte.
  for (int i = 0; i < 50; ++i) {
    const auto& expected = sent[static_cast<std::size_t>(i)];
    auto [header, text] = receive_raw(i % 2 == 0 ? expected.length : 0);
    EXPECT_TRUE(same_bytes(header, expected)) << "frame " << i;
    if (i % 2 == 0) {
      EXPECT_EQ(text, "reason " + std::to_string(i));
    }
  }
  // And back: the raw end sends them, the connection's reader hands them over unchanged.
  for (int i = 0; i < 50; ++i)
    send_raw(sent[static_cast<std::size_t>(i)], i % 2 == 0 ? "reason " + std::to_string(i) : "");
  ASSERT_TRUE(received_->wait(50));
  auto got = frames();
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(
        same_bytes(got[static_cast<std::size_t>(i)].first, sent[static_cast<std::size_t>(i)]))
        << "frame " << i;
    EXPECT_EQ(got[static_cast<std::size_t>(i)].second,
              i % 2 == 0 ? "reason " + std::to_string(i) : "");
  }
}

// A payload from guarded memory goes out while pinned; if the gate closed first, the frame goes
// out empty and marked Cancelled, so the peer's accounting still balances.
TEST_F(FrameCodec, PayloadFromGuardedMemoryOrCancelledWhenTheGateClosed) {
  std::string memory(1000, 'x');
  AccessGate open_gate, closed_gate;
  closed_gate.close(0ms);
  for (AccessGate* gate : {&open_gate, &closed_gate}) {
    OutFrame frame;
    frame.header.type = FrameType::ReadResponse;
    frame.header.length = memory.size();
    frame.data = reinterpret_cast<const std::byte*>(memory.data());
    frame.gate = gate;
    ASSERT_TRUE(connection_->send(std::move(frame)));
  }
  auto [whole, bytes] = receive_raw(memory.size());
  EXPECT_EQ(whole.code, 0);
  EXPECT_EQ(whole.length, memory.size());
  EXPECT_EQ(bytes, memory);
  auto [cancelled, none] = receive_raw(0);
  EXPECT_EQ(cancelled.type, FrameType::ReadResponse);
  EXPECT_EQ(cancelled.code, wire_code(ErrorCode::Cancelled));
  EXPECT_EQ(cancelled.length, 0u);
  open_gate.close(10s);  // returns: the sent frame let go of its pin
}

TEST_F(FrameCodec, ATextOfTheMostBytesAllowedPasses) {
  auto header = full_header(FrameType::Hello);
  header.length = FrameHeader::kMaxText;
  send_raw(header, std::string(FrameHeader::kMaxText, 'n'));
  ASSERT_TRUE(received_->wait(1));
  EXPECT_EQ(frames()[0].second.size(), FrameHeader::kMaxText);
}

TEST_F(FrameCodec, OversizedTextClosesTheConnection) {
  auto header = full_header(FrameType::Hello);
  header.length = FrameHeader::kMaxText + 1;
  send_raw(header);  // refused on its length alone: the payload would meet a closed socket
  EXPECT_EQ(received_->wait_closed(),
            "peer lost: connection to raw: protocol error: text payload of 4097 bytes (at most "
            "4096)");
  EXPECT_TRUE(frames().empty());
  EXPECT_FALSE(connection_->alive());
}

TEST_F(FrameCodec, GarbageClosesTheConnectionAndSaysWhy) {
  const std::string not_a_frame =
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(80, '\0');  // 80+ bytes: a whole header
  send_raw(not_a_frame.data(), not_a_frame.size());
  EXPECT_EQ(received_->wait_closed(),
            "peer lost: connection to raw: protocol error: not a memwire frame (magic 0x20544547)");
  EXPECT_TRUE(frames().empty());
}

TEST_F(FrameCodec, AnotherVersionClosesTheConnectionAndSaysWhy) {
  auto header = full_header(FrameType::Notice);
  header.version = 7;
  send_raw(header);
  EXPECT_EQ(received_->wait_closed(),
            "peer lost: connection to raw: protocol error: frame version 7, this build speaks 1");
  EXPECT_TRUE(frames().empty());
}

TEST_F(FrameCodec, AnUnknownTypeClosesTheConnectionAndSaysWhy) {
  auto header = full_header(FrameType::Notice);
  header.type = static_cast<FrameType>(200);
  send_raw(header);
  EXPECT_EQ(received_->wait_closed(),
            "peer lost: connection to raw: protocol error: unknown frame type 200");
  EXPECT_TRUE(frames().empty());
}

// The peer goes away in the middle of a header, or of a payload: nothing half-read is handed on.
TEST_F(FrameCodec, TruncatedHeaderIsNotAFrame) {
  auto header = full_header(FrameType::Notice);
  send_raw(&header, sizeof header / 2);
  pair_.raw.reset();
  EXPECT_EQ(received_->wait_closed(), "peer lost: connection to raw: peer closed the connection");
  EXPECT_TRUE(frames().empty());
}

TEST_F(FrameCodec, TruncatedPayloadIsNotAFrame) {
  auto header = full_header(FrameType::Notice);
  header.length = 100;
  send_raw(header, std::string(40, 'p'));
  pair_.raw.reset();
  EXPECT_EQ(received_->wait_closed(), "peer lost: connection to raw: peer closed the connection");
  EXPECT_TRUE(frames().empty());
}

}  // namespace
