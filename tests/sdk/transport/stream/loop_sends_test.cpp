// A frame marked by_loop (a pool write's bytes: see StreamTransfer::bytes_by_loop) leaves on the
// event loop's thread, never on its sender's: send() returns with nothing written, so that a
// layer stream's caller computes on while the socket copies the layer. Frames sent after it
// follow it in order (a tag never overtakes its bytes), and a pinned one leaves whole even if
// its gate closes meanwhile.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>
#include <future>
#include <memory>
#include <string>

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

// The connection reads nothing here: its peer only receives.
class NoFrames final : public FrameHandler {
 public:
  void on_frame(StreamConnection& connection, const FrameHeader&) override {
    connection.shutdown("unexpected frame");
  }
  void on_closed(StreamConnection&, const Error&) override {}
};

class LoopSends : public ::testing::Test {
 protected:
  void TearDown() override { resume_loop(); }  // before the pair's connection is joined

  // The loop runs nothing else until resume_loop(): whatever it should send stays unsent.
  void hold_loop() {
    std::promise<void> entered;
    pair_.loop.post([&entered, resumed = resume_.get_future().share()] {
      entered.set_value();
      resumed.wait();
    });
    entered.get_future().wait();
  }
  void resume_loop() {
    if (!resumed_) resume_.set_value();
    resumed_ = true;
  }
  bool nothing_written() const {
    char byte = 0;
    return ::recv(pair_.raw.get(), &byte, 1, MSG_DONTWAIT | MSG_PEEK) < 0 && errno == EAGAIN;
  }
  std::pair<FrameHeader, std::string> receive_raw(std::size_t payload) {
    return pair_.receive_raw(payload);
  }

  static OutFrame bulk_frame(const std::string& memory, AccessGate& gate) {
    OutFrame frame;
    frame.header.type = FrameType::ReadResponse;
    frame.header.length = memory.size();
    frame.data = reinterpret_cast<const std::byte*>(memory.data());
    frame.gate = &gate;
    frame.by_loop = true;
    return frame;
  }
  static OutFrame text_frame(const std::string& text) {
    OutFrame frame;
    frame.header.type = FrameType::NoticeResponse;
    frame.text = text;
    return frame;
  }

  test_support::RawConnectionPair pair_{std::make_unique<NoFrames>()};
  std::shared_ptr<StreamConnection>& connection_ = pair_.connection;
  std::promise<void> resume_;
  bool resumed_ = false;
};

TEST_F(LoopSends, AFrameForTheLoopIsNotWrittenOnTheSendersThreadAndWhatFollowsKeepsItsPlace) {
  const std::string memory(256 * 1024, 'y');
  AccessGate gate;
  hold_loop();
  ASSERT_TRUE(connection_->send(bulk_frame(memory, gate)));
  // A small frame behind it, which alone would go out at once from this thread.
  ASSERT_TRUE(connection_->send(text_frame("after")));
  EXPECT_TRUE(nothing_written());
  resume_loop();
  auto [bulk, bytes] = receive_raw(memory.size());
  EXPECT_EQ(bulk.type, FrameType::ReadResponse);
  EXPECT_EQ(bulk.code, 0);
  EXPECT_EQ(bytes, memory);
  auto [after, text] = receive_raw(5);
  EXPECT_EQ(after.type, FrameType::NoticeResponse);
  EXPECT_EQ(text, "after");
  gate.close(10s);  // returns: the sent frame let go of its pin
}

// Pinned before it was queued, a frame leaves whole even though its gate refused new pins
// before the loop sent it (the first request of a pool transfer, which the owner must see to
// know the transfer a cancel ends); unpinned, it goes out empty, as Cancelled.
TEST_F(LoopSends, APinnedFrameLeavesWholeAfterItsGateRefusesPins) {
  const std::string memory(64 * 1024, 'z');
  AccessGate pinned_gate, unpinned_gate;
  hold_loop();
  auto pinned = bulk_frame(memory, pinned_gate);
  pinned.pin = pinned_gate.pin();
  ASSERT_TRUE(pinned.pin);
  ASSERT_TRUE(connection_->send(std::move(pinned)));
  ASSERT_TRUE(connection_->send(bulk_frame(memory, unpinned_gate)));
  pinned_gate.refuse();
  unpinned_gate.refuse();
  resume_loop();
  auto [whole, bytes] = receive_raw(memory.size());
  EXPECT_EQ(whole.code, 0);
  EXPECT_EQ(bytes, memory);
  auto [cancelled, none] = receive_raw(0);
  EXPECT_EQ(cancelled.code, wire_code(ErrorCode::Cancelled));
  EXPECT_EQ(cancelled.length, 0u);
  pinned_gate.close(10s);  // returns: the sent frame let go of its pin
}

}  // namespace
