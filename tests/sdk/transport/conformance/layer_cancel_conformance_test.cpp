// Ending a layer stream early (issue 32 item 3): decode's cancel() closes the request's grant,
// so prefill's transfers of it fail at once with Cancelled (not at their deadline) and no late
// byte lands; prefill's cancel() ends decode's waits with Cancelled and its reason, not
// PeerLost.
#include <future>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/error_code_of.hpp"
#include "support/raw_stream_peer.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = FilledBlocks::kBlock;

struct Blocks : FilledBlocks {
  explicit Blocks(char fill) : FilledBlocks(8, fill) {}
};

using LayerCancel = PoolTransportConformance;

TEST_P(LayerCancel, ReceiversCancelClosesTheGrantAndTheSendersTransfersFailAtOnce) {
  Connector decode(options_named("decode")), prefill(options_named("prefill"));
  Blocks there(0), here('p');
  auto pool = decode.register_pool(there.regions());
  auto local = prefill.register_pool(here.regions());
  LayerReceiver receive(pool, pool.grant("prefill", "req-7", {0, 1, 2, 3}, Access::Write, 30s),
                        "req-7");
  LayerSender send(prefill, local, receive.grant_metadata(), "req-7");
  send.send(0, {{0, 0}});
  receive.wait(0, 20s);
  EXPECT_TRUE(there.block_is(0, 'p'));

  receive.cancel("decode evicted the request");
  const auto started = std::chrono::steady_clock::now();
  send.send(1, {{1, 1}});
  const auto failure = error_of([&] { send.finish(30s); });
  EXPECT_EQ(failure.code(), ErrorCode::Cancelled) << failure.what();
  EXPECT_NE(std::string(failure.what()).find("blocks released by the owner for request req-7"),
            std::string::npos)
      << failure.what();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s)
      << "failed at its deadline, not at once";
  EXPECT_TRUE(there.block_is(1, 0)) << "a byte landed after the cancel";
  const auto waited = error_of([&] { receive.wait(1, 5s); });
  EXPECT_EQ(waited.code(), ErrorCode::Cancelled) << waited.what();
  EXPECT_NE(std::string(waited.what()).find("decode evicted the request"), std::string::npos);
}

TEST_P(LayerCancel, TheSenderLearnsTheReceiversCancelAtOnceAndStopsSending) {
  Connector decode(options_named("decode")), prefill(options_named("prefill"));
  Blocks there(0), here('p');
  auto pool = decode.register_pool(there.regions());
  auto local = prefill.register_pool(here.regions());
  LayerReceiver receive(pool, pool.grant("prefill", "req-8", {0, 1, 2, 3}, Access::Write, 30s),
                        "req-8");
  LayerSender send(prefill, local, receive.grant_metadata(), "req-8");
  send.send(0, {{0, 0}});
  receive.wait(0, 20s);
  EXPECT_FALSE(send.cancelled());
  receive.cancel("decode dropped the request");
  // The next layer's transfer is refused; the sender knows as soon as that answer is in, not
  // at finish(): an engine polling cancelled() stops computing.
  send.send(1, {{1, 1}});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!send.cancelled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(send.cancelled()) << "the sender never learnt of the abort";
  const auto refused = error_of([&] { send.send(2, {{2, 2}}); });
  EXPECT_EQ(refused.code(), ErrorCode::Cancelled) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("decode dropped the request"), std::string::npos)
      << refused.what();
  EXPECT_EQ(send.layers_sent(), 2u) << "a layer was sent after the abort was known";
  EXPECT_TRUE(there.block_is(2, 0));
}

TEST_P(LayerCancel, ReceiversCancelEndsItsWaitsOnOtherThreads) {
  Connector decode(options_named("decode"));
  Blocks there(0);
  auto pool = decode.register_pool(there.regions());
  LayerReceiver receive(pool, pool.grant("prefill", "req-5", {0}, Access::Write, 30s), "req-5");
  auto waiting =
      std::async(std::launch::async, [&] { return error_of([&] { receive.wait(5, 30s); }); });
  std::this_thread::sleep_for(100ms);
  receive.cancel("client went away");
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  const auto error = waiting.get();
  EXPECT_EQ(error.code(), ErrorCode::Cancelled) << error.what();
  EXPECT_NE(std::string(error.what()).find("client went away"), std::string::npos);
}

TEST_P(LayerCancel, ACancelledSenderSendsNothingMore) {
  Connector decode(options_named("decode")), prefill(options_named("prefill"));
  Blocks there(0), here('p');
  auto pool = decode.register_pool(there.regions());
  auto local = prefill.register_pool(here.regions());
  LayerSender send(prefill, local, pool.metadata(), "req-3");
  send.cancel("prefill preempted");
  EXPECT_EQ(error_code_of([&] { send.send(0, {{0, 0}}); }), ErrorCode::Cancelled);
  EXPECT_EQ(error_code_of([&] {
              send.send(0, {{0, 0}}, BlockSlice{.length = 16});
            }),
            ErrorCode::Cancelled);
  EXPECT_EQ(error_code_of([&] { send.finish(1s); }), ErrorCode::Cancelled);
  EXPECT_TRUE(there.block_is(0, 0));
}

// A cancel right after a layer was sent, its bytes still on their way (over tcp the loop sends
// them, not send()), ends decode's waits of the stream with Cancelled and, where the transport
// carries it, the reason, unless the layer's tag arrived behind all its bytes first. Never a
// wait that only times out: the owner hears of the layer's transfer before its cancel.
TEST_P(LayerCancel, ACancelRightAfterASendEndsTheStreamsWaitsUnlessTheLayerArrivedWhole) {
  constexpr std::size_t kLayer = 64u << 20;
  Connector decode(options_named("decode")), prefill(options_named("prefill"));
  std::vector<std::byte> there(kLayer), here(kLayer, std::byte{'p'});
  auto pool = decode.register_pool({{there.data(), kLayer, 0, 1, {}}});
  auto local = prefill.register_pool({{here.data(), kLayer, 0, 1, {}}});
  LayerReceiver receive(pool, "req-9", "prefill");
  LayerSender send(prefill, local, pool.metadata(), "req-9");
  send.send(0, {{0, 0}});
  send.cancel("prefill preempted");
  try {
    receive.wait(0, 20s);
    EXPECT_TRUE(there == here) << "the tag came before the layer's bytes";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Cancelled) << error.what();
    // Verbs carries the code alone (a pool notice's one text field holds the tag), and there
    // only the cancelled layer's waits end.
    if (transport() == "verbs") return;
    EXPECT_NE(std::string(error.what()).find("prefill preempted"), std::string::npos)
        << error.what();
    const auto later = error_of([&] { receive.wait(1, 5s); });
    EXPECT_EQ(later.code(), ErrorCode::Cancelled) << later.what();
  }
}

MEMWIRE_CONFORMANCE_SUITE(LayerCancel);

// The frames of a sender's cancel, played by hand over tcp: a layer whose transfer was admitted
// and then ended with code Cancelled. Every wait of the stream ends with Cancelled and the
// sender's reason (before, it was PeerLost, and only that layer's wait ended).
TEST(LayerCancelFrames, ASendersCancelEndsTheStreamsWaitsWithCancelledAndItsReason) {
  Connector decode(conformance_options("tcp"));
  Blocks there(0);
  auto pool = decode.register_pool(there.regions());
  LayerReceiver receive(pool, "req-8");
  RawStreamPeer raw(pool.metadata());
  raw.hello("prefill");
  raw.pool_request(detail::FrameType::PoolWriteRequest, 1, {{0, 0, kBlock, kBlock}}, "req-8/3", 0,
                   std::vector<std::byte>(kBlock, std::byte{'p'}));
  EXPECT_EQ(raw.answer().first, 0);
  raw.pool_end(1, wire_code(ErrorCode::Cancelled), "prefill lost its GPU");
  EXPECT_EQ(raw.answer().first, 0);
  for (std::uint32_t layer : {3u, 4u}) {
    const auto error = error_of([&] { receive.wait(layer, 5s); });
    EXPECT_EQ(error.code(), ErrorCode::Cancelled) << "layer " << layer << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find("prefill lost its GPU"), std::string::npos)
        << error.what();
  }
}

}  // namespace
