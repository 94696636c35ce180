// Pools a peer can trust (issue 36): a tag is delivered only as the last step of a transfer the
// owner admitted, once; a failure ends only that transfer's waits; peers are who their grant
// says; one peer's tags never crowd out another's; nothing between blocks is reachable. Raw
// frames play the hostile peer over tcp; the API cases run over every transport.
#include <atomic>
#include <cstring>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/error_code_of.hpp"
#include "support/raw_stream_peer.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = 4096;
using detail::FramePiece;
using detail::FrameType;

struct Blocks {
  explicit Blocks(std::size_t count) : memory(count * kBlock) {}
  std::vector<BlockRegion> regions() {
    return {{memory.data(), kBlock, 0, memory.size() / kBlock, {}}};
  }
  std::vector<std::byte> memory;
};

PoolOptions access(bool read, bool write) {
  PoolOptions options;
  options.remote_read = read;
  options.remote_write = write;
  return options;
}

std::vector<std::byte> bytes_of(char c, std::size_t n = kBlock) {
  return std::vector<std::byte>(n, static_cast<std::byte>(c));
}

bool all_zero(const std::vector<std::byte>& memory) {
  for (auto byte : memory)
    if (byte != std::byte{0}) return false;
  return true;
}

using PoolTrustConformance = PoolTransportConformance;

// A hostile peer speaking raw stream frames over tcp (shm carries the same frames).
class PoolTrustOverRawFrames : public ::testing::Test {
 protected:
  static ConnectorOptions options() { return conformance_options("tcp"); }
};

// Finding 1 of issue 36: bare tags to a pool that allows nothing were delivered, 0 bytes moved.
TEST_F(PoolTrustOverRawFrames, ATagWithNoAdmittedTransferIsRefusedAsAFault) {
  Connector owner(options());
  Blocks there(4);
  auto pool = owner.register_pool(there.regions(), access(false, false));
  RawStreamPeer raw(pool.metadata());
  raw.hello("prefill-A");
  raw.pool_end(17);
  EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::Protocol));
  EXPECT_TRUE(raw.hung_up()) << "a forged tag must close its connection";
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("req-17/0", 200ms); }), ErrorCode::Timeout);
  EXPECT_EQ(pool.queued_notifications(), 0u);
  EXPECT_EQ(pool.peer_faults(), 1u);
  EXPECT_TRUE(all_zero(there.memory));
}

TEST_F(PoolTrustOverRawFrames, ATransferDeliversItsTagOnceAfterItsBytes) {
  Connector owner(options());
  Blocks there(4);
  auto pool = owner.register_pool(there.regions());
  RawStreamPeer raw(pool.metadata());
  raw.hello("writer");
  raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, kBlock, kBlock}}, "t", 0, bytes_of('w'));
  EXPECT_EQ(raw.answer().first, 0);
  raw.pool_end(1);
  EXPECT_EQ(raw.answer().first, 0);
  const auto got = pool.wait_for_tag("t", 5s);
  EXPECT_EQ(got.peer, "writer");
  EXPECT_FALSE(got.authenticated) << "the shared token says nothing about who the peer is";
  EXPECT_EQ(there.memory[kBlock], std::byte{'w'});
  // A second end of the same transfer is a second tag: refused, counted, connection closed.
  raw.pool_end(1);
  EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::Protocol));
  EXPECT_TRUE(raw.hung_up());
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("t", 200ms); }), ErrorCode::Timeout);
  EXPECT_EQ(pool.peer_faults(), 1u);
}

TEST_F(PoolTrustOverRawFrames, ATagForAnAccessThePoolForbidsIsNeverDelivered) {
  Connector owner(options());
  Blocks there(4);
  auto pool = owner.register_pool(there.regions(), access(true, false));
  RawStreamPeer raw(pool.metadata());
  raw.hello("writer");
  raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, kBlock}}, "forbidden", 0,
                   bytes_of('x'));
  EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::AccessDenied));
  raw.pool_end(1);  // its sender pipelined the tag: answered with why it was not delivered
  EXPECT_NE(raw.answer().first, 0);
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("forbidden", 200ms); }), ErrorCode::Timeout);
  // A well-formed request for what the pool forbids is a refusal, not a protocol fault: counted
  // apart, and its connection goes on (a read, which the pool allows, is answered).
  EXPECT_EQ(pool.refusals(), 1u);
  EXPECT_EQ(pool.peer_faults(), 0u);
  EXPECT_TRUE(all_zero(there.memory));
  raw.pool_request(FrameType::PoolReadRequest, 2, {{0, 0, 0, kBlock}}, "");
  const auto [code, payload] = raw.answer();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(payload.size(), kBlock);
}

// Finding 3: one failure notice with an empty tag ended every wait.
TEST_F(PoolTrustOverRawFrames, AFailureEndsOnlyTheWaitsOfItsOwnTransfer) {
  Connector owner(options()), writer(options());
  Blocks there(4), here(4);
  auto pool = owner.register_pool(there.regions());
  auto local = writer.register_pool(here.regions());
  std::atomic<int> other_wait{-1};
  std::thread waiter([&] {
    try {
      other_wait = pool.wait_for_tag("real", 20s).tag == "real" ? 1 : 0;
    } catch (const Error& error) {
      other_wait = 100 + static_cast<int>(error.code());
    }
  });
  RawStreamPeer raw(pool.metadata());
  raw.hello("hostile");
  raw.pool_end(99, wire_code(ErrorCode::PeerLost), "no such transfer");
  EXPECT_EQ(raw.answer().first, 0) << "a failure of nothing admitted changes nothing";
  raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, kBlock}}, "mine", 0, bytes_of('m'));
  EXPECT_EQ(raw.answer().first, 0);
  raw.pool_end(1, wire_code(ErrorCode::Cancelled), "gave up");
  EXPECT_EQ(raw.answer().first, 0);
  // A peer's cancel is told as such (issue 32): Cancelled, not PeerLost.
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("mine", 5s); }), ErrorCode::Cancelled);
  // The real writer's tag still arrives, and its wait was never ended by the others.
  auto write = writer.write_blocks(local, {{1, 1}}, pool.metadata(), "real");
  EXPECT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  waiter.join();
  EXPECT_EQ(other_wait.load(), 1);
  EXPECT_EQ(pool.queued_notifications(), 0u) << "no failure may stay queued for nobody";
}

TEST_F(PoolTrustOverRawFrames, ALostConnectionEndsOnlyItsOpenTransfersWaits) {
  Connector owner(options());
  Blocks there(4);
  auto pool = owner.register_pool(there.regions());
  {
    RawStreamPeer raw(pool.metadata());
    raw.hello("vanishing");
    raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, kBlock}}, "open", 0, bytes_of('o'));
    EXPECT_EQ(raw.answer().first, 0);
  }
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("open", 5s); }), ErrorCode::PeerLost);
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("never-begun", 200ms); }), ErrorCode::Timeout);
}

// Finding 5: a strided region's gaps were readable and writable.
TEST_F(PoolTrustOverRawFrames, TheBytesBetweenBlocksAreUnreachable) {
  Connector owner(options());
  std::vector<std::byte> spaced(8 * 2 * kBlock, std::byte{'s'});  // 's': the owner's secret
  for (std::size_t block = 0; block < 8; ++block)
    std::memset(spaced.data() + 2 * block * kBlock, 0, kBlock);
  auto pool = owner.register_pool({{spaced.data(), kBlock, 2 * kBlock, 8, {}}});
  RawStreamPeer raw(pool.metadata());
  raw.hello("prober");
  raw.pool_request(FrameType::PoolReadRequest, 1, {{0, 0, 0, kBlock}}, "");
  auto [code, payload] = raw.answer();
  EXPECT_EQ(code, 0) << "a whole block is the pool's";
  for (const auto& [offset, length] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {kBlock, 16}, {kBlock - 8, 16}, {0, 2 * kBlock}, {3 * kBlock + 1, 16}}) {
    raw.pool_request(FrameType::PoolReadRequest, 1, {{0, 0, offset, length}}, "");
    auto [refused, secret] = raw.answer();
    EXPECT_EQ(refused, wire_code(ErrorCode::AccessDenied)) << offset << "+" << length;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(secret.data()), secret.size()).find("sss"),
              std::string::npos);
    raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, offset, length}}, "", 0,
                     bytes_of('G', length));
    EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::AccessDenied));
  }
  for (std::size_t block = 0; block < 8; ++block)
    EXPECT_EQ(spaced[(2 * block + 1) * kBlock], std::byte{'s'}) << "gap after block " << block;
}

TEST_F(PoolTrustOverRawFrames, NamesAndTagsTheOwnerCannotStoreAreRefused) {
  Connector owner(options());
  Blocks there(4);
  auto pool = owner.register_pool(there.regions());
  {
    RawStreamPeer raw(pool.metadata());
    raw.hello(std::string("a\0\xff\xfe\n\"", 6));
    EXPECT_NE(raw.answer().first, 0);
    EXPECT_TRUE(raw.hung_up());
  }
  {
    RawStreamPeer raw(pool.metadata());
    raw.hello(std::string(Connector::kMaxTagBytes + 1, 'n'));
    EXPECT_NE(raw.answer().first, 0);
    EXPECT_TRUE(raw.hung_up());
  }
  {
    RawStreamPeer raw(pool.metadata());
    raw.hello("ok");
    raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, 8}},
                     std::string(Connector::kMaxTagBytes + 1, 't'), 0, bytes_of('t', 8));
    EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::Protocol));
    EXPECT_TRUE(raw.hung_up());
  }
  {
    RawStreamPeer raw(pool.metadata());
    raw.hello("ok");
    raw.pool_request(FrameType::PoolWriteRequest, 1, {{0, 0, 0, 8}}, std::string("a\0b", 3), 0,
                     bytes_of('t', 8));
    EXPECT_EQ(raw.answer().first, wire_code(ErrorCode::Protocol));
  }
  EXPECT_EQ(pool.queued_notifications(), 0u);
  ConnectorOptions bad = options();
  bad.name = std::string("a\0b", 3);
  EXPECT_EQ(error_code_of([&] { Connector refused(bad); }), ErrorCode::InvalidArgument);
}

// Finding 2: `from` trusted the name a peer gave itself.
TEST_P(PoolTrustConformance, APeerIsWhoItsGrantSays) {
  Connector owner(options()), granted(options()), impostor([&] {
    auto named = options();
    named.name = "prefill-A";
    return named;
  }());
  Blocks there(8), here(8), theirs(8);
  auto pool = owner.register_pool(there.regions());
  auto local = granted.register_pool(here.regions());
  auto impostors = impostor.register_pool(theirs.regions());
  const auto for_a = pool.metadata_for("prefill-A");
  EXPECT_NE(for_a.token(), pool.metadata().token());
  EXPECT_EQ(pool.metadata_for("prefill-A").token(), for_a.token()) << "one token per grant";
  auto write = granted.write_blocks(local, {{0, 0}}, for_a, "req-17/0");
  EXPECT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  const auto got = pool.wait_for_tag("req-17/0", 5s, "prefill-A");
  EXPECT_EQ(got.peer, "prefill-A");
  EXPECT_TRUE(got.authenticated);
  // A connector calling itself prefill-A, with the shared token, cannot pass for it.
  auto forged = impostor.write_blocks(impostors, {{1, 1}}, pool.metadata(), "req-17/1");
  EXPECT_EQ(failure_code(forged, 10s), ErrorCode::AccessDenied);
  EXPECT_EQ(error_code_of([&] { pool.wait_for_tag("req-17/1", 200ms, "prefill-A"); }),
            ErrorCode::Timeout);
  // Revoked alone: its token stops working, the shared one still does.
  EXPECT_TRUE(pool.revoke("prefill-A"));
  auto late = granted.write_blocks(local, {{2, 2}}, for_a, "req-17/2");
  EXPECT_EQ(failure_code(late, 10s), ErrorCode::AccessDenied);
  auto shared = granted.write_blocks(local, {{3, 3}}, pool.metadata(), "shared");
  EXPECT_EQ(shared.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_FALSE(pool.wait_for_tag("shared", 5s).authenticated);
  EXPECT_EQ(error_code_of([&] { (void)pool.metadata_for(std::string("x\0y", 3)); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { (void)pool.metadata_for(""); }), ErrorCode::InvalidArgument);
}

// Finding 4: one peer's flood filled the queue and the real writer's transfers failed.
TEST_P(PoolTrustConformance, OnePeersUntakenTagsNeverBlockAnothers) {
  Connector owner(options()), flooder(options()), writer(options());
  Blocks there(8), mine(8), theirs(8);
  PoolOptions bounded;
  bounded.max_queued_per_peer = 2;
  auto pool = owner.register_pool(there.regions(), bounded);
  auto flooding = flooder.register_pool(theirs.regions());
  auto local = writer.register_pool(mine.regions());
  const auto for_flooder = pool.metadata_for("flooder");
  for (int n = 0; n < 2; ++n) {
    auto write = flooder.write_blocks(flooding, {{0, 0}}, for_flooder, "f" + std::to_string(n));
    ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
  }
  auto over = flooder.write_blocks(flooding, {{0, 0}}, for_flooder, "f2");
  EXPECT_EQ(failure_code(over, 10s), ErrorCode::Transport);
  EXPECT_NE(over.error_message().find("max_queued_per_peer"), std::string::npos)
      << over.error_message();
  auto real = writer.write_blocks(local, {{1, 1}}, pool.metadata_for("writer"), "w0");
  EXPECT_EQ(real.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(pool.wait_for_tag("w0", 5s, "writer").peer, "writer");
  EXPECT_EQ(pool.wait_for_tag("f0", 5s, "flooder").tag, "f0");  // taken: room again
  auto again = flooder.write_blocks(flooding, {{0, 0}}, for_flooder, "f3");
  EXPECT_EQ(again.wait_for_completion(10s), OperationStatus::Complete);
}

// Finding 5, on every transport: what a peer can reach is the union of the blocks. Verbs
// grants whole spans, so it is not offered for a pool whose spans hold other bytes; interleaved
// K/V regions fill each other's gaps and stay one grant each.
TEST_P(PoolTrustConformance, OnlyTransportsThatExposeJustTheBlocksServeAPoolWithGaps) {
  Connector owner(options()), peer(options());
  std::vector<std::byte> spaced(8 * 2 * kBlock, std::byte{'s'});
  if (transport() == "verbs") {
    const auto refused = error_code_of([&] {
      auto pool = owner.register_pool({{spaced.data(), kBlock, 2 * kBlock, 8, {}}});
    });
    EXPECT_EQ(refused, ErrorCode::Transport) << "verbs keys would expose the gaps";
  } else {
    auto pool = owner.register_pool({{spaced.data(), kBlock, 2 * kBlock, 8, {}}});
    EXPECT_EQ(pool.metadata().endpoint().transports.at(0).name, transport());
  }
  // K and V interleaved block by block: together they leave no gap.
  std::vector<std::byte> kv(2 * 8 * kBlock), here(2 * 8 * kBlock);
  auto both = owner.register_pool(
      {{kv.data(), kBlock, 2 * kBlock, 8, {}}, {kv.data() + kBlock, kBlock, 2 * kBlock, 8, {}}});
  ASSERT_EQ(both.metadata().endpoint().transports.at(0).name, transport());
  auto local = peer.register_pool({{here.data(), kBlock, 0, 16, {}}});
  fill_pattern(std::span(here).subspan(3 * kBlock, kBlock), 31);
  fill_pattern(std::span(here).subspan(11 * kBlock, kBlock), 32);
  auto write = peer.write_blocks(local, {{3, 3}, {8 + 5, 11}}, both.metadata(), "kv");
  ASSERT_EQ(write.wait_for_completion(20s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(std::span(kv).subspan(6 * kBlock, kBlock), 31), kBlock);   // K block 3
  EXPECT_EQ(first_mismatch(std::span(kv).subspan(11 * kBlock, kBlock), 32), kBlock);  // V block 5
}

MEMWIRE_CONFORMANCE_SUITE(PoolTrustConformance);

}  // namespace
