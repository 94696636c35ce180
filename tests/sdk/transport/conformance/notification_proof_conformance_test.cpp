// A notification says what it proves (issue 44 item 2): the transfer's kind (a read's tag says
// nothing landed in the owner's pool) and the token it ran under. wait_for_tag and LayerReceiver
// take writes unless asked for reads; a granted LayerReceiver takes only transfers under its
// grant's token, whatever name a shared-token peer gives itself; a failure ends only the waits
// its own transfer could have satisfied.
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

void wait_ok(Operation& operation) {
  ASSERT_EQ(operation.wait_for_completion(20s), OperationStatus::Complete);
}

using NotificationProof = PoolTransportConformance;

TEST_P(NotificationProof, ATaggedReadOfOneByteSatisfiesNoWriteWait) {
  Connector decode(options_named("decode")), reader(options_named("prefill"));
  Blocks there(0), here(0);
  auto pool = decode.register_pool(there.regions());
  auto local = reader.register_pool(here.regions());
  auto read = reader.read_blocks(pool.metadata(), {{0, 0}}, local, {.length = 1}, "req-1/0");
  wait_ok(read);
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("req-1/0", 300ms); }), ErrorCode::Timeout);
  EXPECT_FALSE(pool.try_wait_for_tag("req-1/0").has_value());
  LayerReceiver receive(pool, "req-1");
  EXPECT_EQ(error_code_of([&] { receive.wait(0, 300ms); }), ErrorCode::Timeout);
  // Asked for, it is there, and says what it was.
  const auto notification = pool.wait_for_tag("req-1/0", 10s, {}, TagKinds::Reads);
  EXPECT_EQ(notification.kind, OperationKind::Read);
  EXPECT_EQ(notification.token, pool.metadata().token());
  EXPECT_TRUE(there.block_is(1, 0));
}

TEST_P(NotificationProof, AWritesNotificationNamesItsKindAndToken) {
  Connector decode(options_named("decode")), writer(options_named("prefill"));
  Blocks there(0), here('p');
  auto pool = decode.register_pool(there.regions());
  auto local = writer.register_pool(here.regions());
  auto grant = pool.grant("prefill", "req-2", {3}, Access::Write, 30s);
  auto write = writer.write_blocks(local, {{3, 0}}, grant.metadata(), "req-2/0");
  wait_ok(write);
  const auto notification = pool.wait_for_tag("req-2/0", 10s);
  EXPECT_EQ(notification.kind, OperationKind::Write);
  EXPECT_EQ(notification.token, grant.metadata().token());
  EXPECT_NE(notification.token, pool.metadata().token());
}

TEST_P(NotificationProof, ASharedTokenPeerCallingItselfTheGranteeFeedsNoGrantedReceiver) {
  Connector decode(options_named("decode")), impostor(options_named("prefill-A")),
      prefill(options_named("prefill-A"));
  Blocks there(0), here('p');
  auto pool = decode.register_pool(there.regions());
  auto local = impostor.register_pool(here.regions());
  auto real_local = prefill.register_pool(here.regions());
  LayerReceiver receive(pool, pool.grant("prefill-A", "req-17", {0, 1, 2, 3}, Access::Write, 30s),
                        "req-17");
  // Real bytes, a write, the right tag and name: under the shared token, not the grant's.
  auto forged = impostor.write_blocks(local, {{4, 0}}, pool.metadata(), layer_tag("req-17", 0));
  wait_ok(forged);
  EXPECT_EQ(error_code_of([&] { receive.wait(0, 300ms); }), ErrorCode::Timeout)
      << "a shared-token peer's tag passed for the grantee's";
  LayerSender send(prefill, real_local, receive.grant_metadata(), "req-17");
  send.send(0, {{0, 0}});
  receive.wait(0, 20s);
  send.finish(20s);
  EXPECT_TRUE(there.block_is(0, 'p'));
}

// A hostile peer speaking raw stream frames over tcp (shm carries the same frames).
class NotificationProofOverRawFrames : public ::testing::Test {
 protected:
  static ConnectorOptions options() { return conformance_options("tcp"); }
};

TEST_F(NotificationProofOverRawFrames, ASharedTokenPeersCancelEndsNoWaitOfAGrantedReceiver) {
  auto named = options();
  named.name = "decode";
  Connector decode(named);
  Blocks there(0);
  auto pool = decode.register_pool(there.regions());
  LayerReceiver receive(pool, pool.grant("prefill-A", "req-17", {0, 1}, Access::Write, 30s),
                        "req-17");
  RawStreamPeer raw(pool.metadata());
  raw.hello("prefill-A");
  const std::vector<std::byte> bytes(kBlock, std::byte{'x'});
  raw.pool_request(detail::FrameType::PoolWriteRequest, 1, {{0, 0, 4 * kBlock, kBlock}}, "req-17/9",
                   0, bytes);
  EXPECT_EQ(raw.answer().first, 0);
  raw.pool_end(1, wire_code(ErrorCode::Cancelled), "gave up");
  EXPECT_EQ(raw.answer().first, 0);
  for (std::uint32_t layer = 0; layer < 4; ++layer)
    EXPECT_EQ(error_code_of([&] { receive.wait(layer, 200ms); }), ErrorCode::Timeout)
        << "layer " << layer << ": ended by another token's cancelled transfer";
}

TEST_F(NotificationProofOverRawFrames, AFailedReadEndsNoWaitForAWrite) {
  Connector decode(options());
  Blocks there(0);
  auto pool = decode.register_pool(there.regions());
  RawStreamPeer raw(pool.metadata());
  raw.hello("reader");
  raw.pool_request(detail::FrameType::PoolReadRequest, 1, {{0, 0, 0, 1}}, "t");
  const auto [code, payload] = raw.answer();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(payload.size(), 1u);
  raw.pool_end(1, wire_code(ErrorCode::Cancelled), "gave up");
  EXPECT_EQ(raw.answer().first, 0);
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("t", 300ms); }), ErrorCode::Timeout)
      << "a read's failure ended a wait for a write";
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("t", 10s, {}, TagKinds::Reads); }),
            ErrorCode::Cancelled);
}

MEMWIRE_CONFORMANCE_SUITE(NotificationProof);

}  // namespace
