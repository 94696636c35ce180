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
#include "util/test_hooks.hpp"

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

// The value of the writer's first write in round `round` (each next write's is one more,
// modulo 255, never 0: tests/support/grant_writer.cpp). A round starts where the last left
// off, about: a byte of a late write differs from what any earlier write left.
std::byte fill_of(int round) { return static_cast<std::byte>(1 + (round * 64) % 255); }

// The first byte of `memory` that differs from `expected` inside the granted blocks (`inside`)
// or, against 0, anywhere outside them (odd blocks, gaps), as "block B offset O: V (N bytes)",
// or "".
std::string landed_in(const std::vector<std::byte>& memory, const std::vector<std::byte>& expected,
                      bool inside) {
  for (std::size_t block = 0; block < kBlocks; ++block) {
    const auto at = block * kStride;
    const bool granted = block < kGranted;
    // Inside: the block if granted. Outside: the block if not, and its gap either way.
    const auto begin = inside ? at : (granted ? at + kBlock : at);
    const auto end = inside ? (granted ? at + kBlock : at) : at + kStride;
    std::size_t first = end, differing = 0;
    for (auto i = begin; i < end; ++i)
      if (memory[i] != (inside ? expected[i] : std::byte{0})) {
        first = std::min(first, i);
        ++differing;
      }
    if (differing == 0) continue;
    std::ostringstream out;
    out << "block " << block << " offset " << (first - at) << ": "
        << std::to_integer<int>(memory[first]) << " (" << differing << " bytes)";
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
// (every write its own value) until `end(grant)` returns: from then on no byte may land in
// them, and none ever outside. Nothing is cleared after the end (a late byte landing before
// the clearing would be erased uncounted): the blocks as they were when end() returned are
// compared once the writer stopped, and again when the next round begins. A late write
// carries a value no write that landed before the end had, so it shows.
template <class End>
Rounds hammer(Pool& pool, ChildProcess& writer, std::vector<std::byte>& memory, int rounds,
              std::chrono::milliseconds lease, End end) {
  std::vector<std::uint64_t> granted;
  for (std::uint64_t block = 0; block < kGranted; ++block) granted.push_back(block);
  Rounds seen;
  std::vector<std::byte> at_end(memory.size()), after_stop(memory.begin(), memory.end());
  const auto saw = [&](int round, const std::string& late, const std::string& outside) {
    if (!late.empty()) ++seen.after_end;
    if (!outside.empty()) ++seen.out_of_grant;
    if (seen.first_seen.empty() && !(late.empty() && outside.empty()))
      seen.first_seen = "round " + std::to_string(round) + " (fill " +
                        std::to_string(std::to_integer<int>(fill_of(round))) +
                        "): " + (late.empty() ? "outside the grant: " + outside : late);
  };
  for (int round = 0; round < rounds; ++round) {
    // Nothing landed since the last round's writer stopped.
    if (round > 0) saw(round - 1, landed_in(memory, after_stop, true), {});
    auto grant =
        pool.grant("writer", "req-" + std::to_string(round), granted, Access::Write, lease);
    writer.write_line(std::to_string(std::to_integer<int>(fill_of(round))) + " " +
                      grant.metadata().to_json());
    const auto started = expect_line(writer);
    if (started == "writing") ++seen.writing;
    // A short lease may end before the first write lands.
    EXPECT_TRUE(started == "writing" || started == "refused") << "round " << round << started;
    end(grant);
    // The granted half as end() left it (what lands from now on is late), then the check that
    // nothing ever landed outside the grant.
    std::memcpy(at_end.data(), memory.data(), kGranted * kStride);
    auto outside = landed_in(memory, at_end, false);
    const auto stopped = expect_line(writer);
    EXPECT_EQ(stopped.rfind("stopped ", 0), 0u) << "round " << round << ": " << stopped;
    if (stopped.rfind("stopped ", 0) != 0) break;
    seen.landed += std::stoull(stopped.substr(8));
    if (outside.empty()) outside = landed_in(memory, at_end, false);
    saw(round, landed_in(memory, at_end, true), outside);
    after_stop = memory;
  }
  return seen;
}

// Widens the owner's window between finding a request's grant and pinning it (PoolState::admit,
// test_hooks) for as long as it lives: a close() that could slip between the two would land
// there in most rounds, in every build.
class WidenedLookupToPin {
 public:
  WidenedLookupToPin() { detail::test_hooks::between_grant_lookup_and_pin = &pause; }
  ~WidenedLookupToPin() { detail::test_hooks::between_grant_lookup_and_pin = nullptr; }
  WidenedLookupToPin(const WidenedLookupToPin&) = delete;
  WidenedLookupToPin& operator=(const WidenedLookupToPin&) = delete;

 private:
  static void pause() { std::this_thread::sleep_for(100us); }
};

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
  WidenedLookupToPin widened;
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
  WidenedLookupToPin widened;
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
