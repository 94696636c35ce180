// A request grant's close() is a fence (issue 44 item 1), and so is its lease's end as
// expired() reports it: once they returned no byte lands under the grant, and no byte ever lands
// outside its blocks, while a writer in another process
// hammers it (tests/support/grant_writer.cpp: writes inside the grant, and outside it with the
// grant's token and no scope). Finding the grant, checking the runs and pinning are one step on
// the owner: a close between two lookups once let a request skip both the run check and the pin.
#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/sanitizers.hpp"
#include "support/test_peer_process.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

// Small scattered blocks with gaps between them: the writer's requests carry many pieces, and
// the owner checks each against the blocks (modulo the stride) before it looks for the grant.
constexpr std::size_t kBlock = 64;
constexpr std::size_t kStride = 2 * kBlock;
constexpr std::size_t kBlocks = 2048;
// Closed by the owner: issue 44's 1,000 (the old code failed 1-4 rounds in 1,000). A round
// under ASan or TSan takes 30-120 ms, not 2: there the rounds run the same paths for the
// sanitizer's reports, and the release build is the one that counts the rare late byte.
constexpr int kRounds = MEMWIRE_TEST_UNDER_SANITIZER ? 100 : 1000;

// The grant: the first half of the blocks (one run: short metadata), each block a piece.
constexpr std::size_t kGranted = kBlocks / 2;

// The first byte that is not 0 in the granted blocks, or else (`inside` false)
// anywhere outside them (odd blocks, gaps), as "block B offset O (N bytes set)", or "".
std::string landed_in(const std::vector<std::byte>& memory, bool inside) {
  const auto set = [](std::byte b) { return b != std::byte{0}; };
  for (std::size_t block = 0; block < kBlocks; ++block) {
    const auto* first = memory.data() + block * kStride;
    const bool granted = block < kGranted;
    // Inside: the block if granted. Outside: the block if not, and its gap either way.
    const auto* begin = inside ? first : (granted ? first + kBlock : first);
    const auto* end = inside ? (granted ? first + kBlock : first) : first + kStride;
    const auto* found = std::find_if(begin, end, set);
    if (found == end) continue;
    std::ostringstream out;
    out << "block " << block << " offset " << (found - first) << " ("
        << std::count_if(begin, end, set) << " bytes set)";
    return out.str();
  }
  return {};
}

// What the rounds of a hammered grant saw.
struct Rounds {
  int writing = 0;       // rounds whose writer landed a write before the grant's end
  int after_end = 0;     // rounds with bytes landed after the end was observed
  int out_of_grant = 0;  // rounds with bytes landed outside the grant
  std::uint64_t landed = 0;
  std::string first_seen;
};

// `rounds` grants of the first half of the blocks (lease `lease`), each hammered by the writer
// until `end(grant)` returns: from then on no byte may land in them, and none ever outside.
template <class End>
Rounds hammer(Pool& pool, ChildProcess& writer, std::vector<std::byte>& memory, int rounds,
              std::chrono::milliseconds lease, End end) {
  std::vector<std::uint64_t> granted;
  for (std::uint64_t block = 0; block < kGranted; ++block) granted.push_back(block);
  Rounds seen;
  for (int round = 0; round < rounds; ++round) {
    auto grant =
        pool.grant("writer", "req-" + std::to_string(round), granted, Access::Write, lease);
    writer.write_line(grant.metadata().to_json());
    const auto started = expect_line(writer);
    if (started == "writing") ++seen.writing;
    // A short lease may end before the first write lands.
    EXPECT_TRUE(started == "writing" || started == "refused") << "round " << round << started;
    end(grant);
    // Outside the grant nothing may have landed, ever; inside, what landed is the owner's now.
    auto outside_now = landed_in(memory, false);
    for (auto block : granted) std::memset(memory.data() + block * kStride, 0, kBlock);
    const auto stopped = expect_line(writer);
    EXPECT_EQ(stopped.rfind("stopped ", 0), 0u) << "round " << round << ": " << stopped;
    if (stopped.rfind("stopped ", 0) != 0) break;
    seen.landed += std::stoull(stopped.substr(8));
    auto late = landed_in(memory, true);
    if (outside_now.empty()) outside_now = landed_in(memory, false);
    if (!late.empty()) ++seen.after_end;
    if (!outside_now.empty()) ++seen.out_of_grant;
    if (seen.first_seen.empty() && !(late.empty() && outside_now.empty()))
      seen.first_seen =
          "round " + std::to_string(round) + ": " + (late.empty() ? outside_now : late);
    std::memset(memory.data(), 0, memory.size());
  }
  return seen;
}

class GrantFence : public PoolTransportConformance {
 protected:
  void SetUp() override {
    PoolTransportConformance::SetUp();
    if (IsSkipped()) return;
    if (!claims().other_processes) GTEST_SKIP() << transport() << " reaches no other process";
    // A pool with gaps is not offered on verbs (its keys cover whole spans); its grants'
    // windows are the NIC's fence (request_grant_nic_test.cpp).
    if (transport() == "verbs") GTEST_SKIP() << "verbs serves no pool with gaps";
  }
  ChildProcess start_writer() const {
    return ChildProcess(
        {test::grant_writer_program(), std::to_string(kBlocks), std::to_string(kBlock)},
        peer_environment());
  }
};

TEST_P(GrantFence, NoByteLandsAfterCloseReturnsOrOutsideTheGrant) {
  Connector owner(options_named("decode"));
  std::vector<std::byte> memory(kBlocks * kStride);
  auto pool = owner.register_pool({{memory.data(), kBlock, kStride, kBlocks, {}}});
  auto writer = start_writer();
  std::mt19937 random(44);
  const auto seen = hammer(pool, writer, memory, kRounds, 30s, [&](BlockGrant& grant) {
    // Closes at a different point of the writer's stream each round.
    const auto spin = std::chrono::steady_clock::now() +
                      std::chrono::microseconds(std::uniform_int_distribution<int>(0, 200)(random));
    while (std::chrono::steady_clock::now() < spin) {
    }
    grant.close("round over");
  });
  writer.write_line("quit");
  EXPECT_EQ(writer.wait(10s), 0);
  EXPECT_EQ(seen.after_end, 0) << "rounds with bytes landed after close() returned; first: "
                               << seen.first_seen;
  EXPECT_EQ(seen.out_of_grant, 0) << "rounds with bytes landed outside the grant; first: "
                                  << seen.first_seen;
  // The hammer hit the grant: each round landed a write before the close.
  EXPECT_EQ(seen.writing, kRounds);
  EXPECT_GE(seen.landed, std::uint64_t{kRounds});
}

// The lease's end is a fence too (issue 44 item 1): once expired() says so, the requests
// admitted before the end are in, and nothing lands after them.
TEST_P(GrantFence, NoByteLandsAfterExpiredSaysTheLeaseEnded) {
  // 200 (the old code let bytes land in 2-20 of them); fewer of the sanitizers' longer leases.
  constexpr int kLeaseRounds = MEMWIRE_TEST_UNDER_SANITIZER ? 50 : 200;
  Connector owner(options_named("decode"));
  std::vector<std::byte> memory(kBlocks * kStride);
  auto pool = owner.register_pool({{memory.data(), kBlock, kStride, kBlocks, {}}});
  auto writer = start_writer();
  // Long enough for the writer to start writing before the end in most rounds, in sanitizer
  // builds too (ASan: a round's setup alone took longer than 15 ms).
  const auto lease = MEMWIRE_TEST_UNDER_SANITIZER ? 60ms : 15ms;
  const auto seen = hammer(pool, writer, memory, kLeaseRounds, lease, [&](BlockGrant& grant) {
    while (!grant.expired()) {
    }
    EXPECT_GE(std::chrono::steady_clock::now(), grant.expires_at())
        << "expired() said true before the lease's end";
    EXPECT_TRUE(grant.closed()) << "the lease's end ends the grant as close() does";
  });
  writer.write_line("quit");
  EXPECT_EQ(writer.wait(10s), 0);
  EXPECT_EQ(seen.after_end, 0) << "rounds with bytes landed after expired() returned true; "
                               << "first: " << seen.first_seen;
  EXPECT_EQ(seen.out_of_grant, 0) << "rounds with bytes landed outside the grant; first: "
                                  << seen.first_seen;
  // Most rounds' writer landed writes before the end (a slow start may miss a short lease).
  EXPECT_GE(seen.writing, kLeaseRounds / 2);
}

MEMWIRE_CONFORMANCE_SUITE(GrantFence);

}  // namespace
