// The life of a verbs grant (issue 36, item 6): "cancelled" means no key works, even when a
// peer stalls the owner's QP (a window bind queued behind a SEND the peer never receives:
// RC retries receiver-not-ready forever); revocations of many grants share one deadline; a
// grant's bookkeeping goes with its operation; a one-shot operation is claimed by a
// connection, not by a name. The peers are raw RC QPs (support/raw_verbs_peer.hpp). Needs an
// RDMA device (integration/rxe); skips elsewhere.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/raw_verbs_peer.hpp"
#include "util/ids.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using namespace memwire::test_support;
using Clock = std::chrono::steady_clock;

namespace {

// The reason (empty) when `access` works here, else why the test skips.
std::string unavailable(const std::string& access) {
  try {
    Connector probe(verbs_owner_options(access));
    return {};
  } catch (const Error& error) {
    return error.what();
  }
}

std::string address_of(const Endpoint& endpoint) { return endpoint.transports.at(0).address; }

// A peer that posts no receives and sends a Begin for no operation: the owner's refusal is a
// SEND that waits for a receive forever, and every work request the owner posts on that QP
// after it (a window bind) waits behind it.
std::unique_ptr<RawVerbsPeer> stalling_peer(const std::string& address, const std::string& name) {
  auto peer = std::make_unique<RawVerbsPeer>(address, name, /*receives=*/0);
  detail::verbs::Notice stall;
  stall.type = detail::verbs::NoticeType::Begin;
  stall.seq = 99;
  stall.key = random_id();
  stall.token = random_id();
  stall.kind = OperationKind::Read;
  EXPECT_EQ(peer->send(stall), IBV_WC_SUCCESS);
  return peer;
}

// The owner handles a notice on its progress thread: under TCG, give it a moment.
void let_the_owner_handle_it() { std::this_thread::sleep_for(700ms); }

class VerbsGrantLifecycle : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam()); !why.empty())
      GTEST_SKIP() << "no RDMA device or no " << GetParam() << " here: " << why;
  }
  ConnectorOptions options() const { return verbs_owner_options(GetParam()); }
};

// Windows only: a protection domain per connection binds nothing.
class VerbsStalledBinds : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = unavailable("windows"); !why.empty())
      GTEST_SKIP() << "no RDMA device with type-2 memory windows here: " << why;
  }
};

TEST_F(VerbsStalledBinds, ACancelWhoseBindStallsClosesThatConnectionBeforeItReturns) {
  Connector owner(verbs_owner_options("windows"));
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  const auto metadata = readable.metadata();
  auto staller = stalling_peer(address_of(metadata.endpoint()), "staller");
  // Granted: its window's bind waits behind the refusal the peer never receives.
  ASSERT_EQ(staller->send(RawVerbsPeer::notice_for(metadata, detail::verbs::NoticeType::Begin, 1)),
            IBV_WC_SUCCESS);
  let_the_owner_handle_it();
  const auto start = Clock::now();
  readable.cancel();
  const auto took = Clock::now() - start;
  // Cancelled with the window maybe bound would leave a key that works: the owner closes that
  // connection (destroying its QP destroys its windows) before cancel() returns.
  EXPECT_TRUE(staller->disconnected_within(3s))
      << "cancel() returned while the stalled connection (and its window) lived on";
  EXPECT_LT(took, 5s);
  std::cout << "cancel with a stalled bind took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  // The owner serves others as before.
  std::vector<std::byte> other(4096);
  auto next = owner.create_readable({Descriptor(std::span(other))});
  RawVerbsPeer reader(address_of(metadata.endpoint()), "reader");
  EXPECT_TRUE(reader.begin(next.metadata()).accepted);
}

TEST_F(VerbsStalledBinds, APoolsStalledGrantsAreRevokedTogetherNotOneAfterAnother) {
  Connector owner(verbs_owner_options("windows"));
  std::vector<std::byte> blocks(16 * 4096);
  auto pool = owner.register_pool({BlockRegion{blocks.data(), 4096, 0, 16, {}}});
  const auto metadata = pool.metadata();
  constexpr int kStallers = 3;
  std::vector<std::unique_ptr<RawVerbsPeer>> stallers;
  for (int i = 0; i < kStallers; ++i) {
    stallers.push_back(stalling_peer(address_of(metadata.endpoint()), "staller"));
    ASSERT_EQ(stallers.back()->send_pool_begin(metadata, 1, "t"), IBV_WC_SUCCESS);
  }
  let_the_owner_handle_it();
  const auto start = Clock::now();
  pool.close();
  const auto took = Clock::now() - start;
  std::cout << "closing a pool with " << kStallers << " stalled grants took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  // One deadline for all (about 2 s), not 2 s each.
  EXPECT_LT(took, 4s);
  for (auto& staller : stallers) EXPECT_TRUE(staller->disconnected_within(3s));
}

// A grant the owner ended (cancel) excuses an access error on that connection for a moment,
// the time a reader in flight needs to hear of it; not for as long as the connection lives.
TEST_P(VerbsGrantLifecycle, ACancelledGrantExcusesNoLaterFault) {
  Connector owner(options());
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  const auto metadata = readable.metadata();
  RawVerbsPeer guesser(address_of(metadata.endpoint()), "guesser");
  ASSERT_TRUE(guesser.begin(metadata).accepted);
  readable.cancel();
  std::this_thread::sleep_for(3s);
  std::vector<std::byte> local(4096);
  EXPECT_NE(guesser.access(true, local, metadata.descriptors()[0].ptr, 0x1234u), IBV_WC_SUCCESS);
  guesser.disconnected_within(3s);
  std::uint64_t faults = 0;
  for (int i = 0; i < 30 && faults == 0; ++i) {
    faults = owner.telemetry().peer_faults;
    if (faults == 0) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(faults, 1u) << "a guess long after a cancel went uncounted";
}

// Two connections that call themselves the same and name the same transfer are still two
// transfers: the second is refused.
TEST_P(VerbsGrantLifecycle, AOneShotOperationIsClaimedByAConnectionNotByAName) {
  Connector owner(options());
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  const auto metadata = readable.metadata();
  const auto address = rail_addresses(metadata).front();
  RawVerbsPeer first(address, "reader");
  ASSERT_TRUE(first.begin(metadata, 1).accepted);
  RawVerbsPeer impostor(address, "reader");
  const auto refused = impostor.begin(metadata, 1);
  EXPECT_FALSE(refused.accepted) << "a second connection with the same name was granted";
  EXPECT_EQ(refused.error, ErrorCode::Cancelled);
  // The first connection's claim stands: its transfer reads and completes the owner.
  EXPECT_EQ(first.done(metadata, 1).value_or(ErrorCode::Protocol), std::nullopt);
  EXPECT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
}

// Windows and regions are capped per connector, pools included (their grants bypass the
// per-connection cap of one-shot operations): past rdma.max_remote_keys a Begin is refused,
// saying which limit, and counted; keys come back when their connection goes.
TEST_P(VerbsGrantLifecycle, RemoteKeysAreCappedPerConnectorPoolsIncluded) {
  auto capped = options();
  capped.rdma.max_remote_keys = 3;
  Connector owner(capped);
  std::vector<std::byte> k(8 * 4096), v(8 * 4096);
  auto pool = owner.register_pool(
      {BlockRegion{k.data(), 4096, 0, 8, {}}, BlockRegion{v.data(), 4096, 0, 8, {}}});
  const auto metadata = pool.metadata();
  const auto address = address_of(metadata.endpoint());
  auto first = std::make_unique<RawVerbsPeer>(address, "first");
  ASSERT_TRUE(first->pool_begin(metadata, 1).accepted);  // 2 keys of 3
  RawVerbsPeer second(address, "second");
  const auto refused = second.pool_begin(metadata, 1);
  EXPECT_FALSE(refused.accepted) << "a pool grant past the connector's cap";
  EXPECT_EQ(refused.error, ErrorCode::Transport);
  EXPECT_NE(refused.text.find("rdma.max_remote_keys"), std::string::npos) << refused.text;
  EXPECT_EQ(owner.telemetry().refused_grants, 1u);
  EXPECT_NE(to_prometheus(owner.telemetry()).find("memwire_refused_grants_total 1"),
            std::string::npos);
  // A one-shot operation's key fits (3 of 3).
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  EXPECT_TRUE(second.begin(readable.metadata(), 2).accepted);
  // The first peer leaves: its keys come back, and the pool is granted again.
  first.reset();
  bool granted = false;
  for (std::uint64_t seq = 3; seq < 40 && !granted; ++seq) {
    RawVerbsPeer third(address, "third");
    granted = third.pool_begin(metadata, seq).accepted;
    if (!granted) std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(granted) << "the keys of a closed connection never came back";
}

INSTANTIATE_TEST_SUITE_P(Access, VerbsGrantLifecycle, ::testing::Values("windows", "connection_pd"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
