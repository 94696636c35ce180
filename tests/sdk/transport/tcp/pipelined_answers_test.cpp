// Requests that arrive together are answered together (one send for the batch): a read that
// is the whole transfer still completes its owner once its answer is out, and every answer
// carries its own bytes, in the order asked.
#include <gtest/gtest.h>

#include <cstring>

#include "memwire/memwire.hpp"
#include "support/raw_stream_peer.hpp"
#include "support/tcp_only.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/ids.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

using memwire::test_support::tcp_only;

}  // namespace

TEST(PipelinedAnswers, ReadsSentTogetherEachCompleteTheirOwner) {
  constexpr std::size_t kReads = 8;
  constexpr std::size_t kSize = 4096;
  Connector owner{tcp_only()};
  std::vector<std::vector<std::byte>> memory;
  std::vector<ReadableOperation> readables;
  for (std::size_t i = 0; i < kReads; ++i) {
    memory.emplace_back(kSize, std::byte(0x10 + i));
    readables.push_back(owner.create_readable({Descriptor(std::span(memory.back()))}));
  }
  test_support::RawStreamPeer peer(readables.front().metadata());
  // Every request whole (kCompletes) and in one send: the owner reads them in one go.
  std::vector<FrameHeader> requests(kReads);
  for (std::size_t i = 0; i < kReads; ++i) {
    auto& header = requests[i];
    header.type = FrameType::ReadRequest;
    header.flags = frame_flags::kCompletes;
    header.request_id = i + 1;
    header.length = kSize;
    header.key = *parse_id(readables[i].metadata().notification_key());
    header.token = *parse_id(readables[i].metadata().token());
  }
  iovec all{requests.data(), requests.size() * sizeof(FrameHeader)};
  ASSERT_TRUE(send_all(peer.socket(), &all, 1));
  for (std::size_t i = 0; i < kReads; ++i) {
    FrameHeader header;
    ASSERT_TRUE(receive_all(peer.socket(), &header, sizeof header));
    EXPECT_EQ(header.code, 0);
    EXPECT_EQ(header.request_id, i + 1);
    ASSERT_EQ(header.length, kSize);
    std::vector<std::byte> bytes(kSize);
    ASSERT_TRUE(receive_all(peer.socket(), bytes.data(), bytes.size()));
    EXPECT_EQ(bytes, memory[i]) << "answer " << i;
  }
  for (auto& readable : readables)
    EXPECT_EQ(readable.wait_for_completion(5s), OperationStatus::Complete);
}
