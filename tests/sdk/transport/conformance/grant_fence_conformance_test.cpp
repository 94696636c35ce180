// A request grant's close() is a fence (issue 44 item 1): once it returns no byte lands under
// the grant, and no byte ever lands outside its blocks, while a writer in another process
// hammers it (tests/support/grant_writer.cpp: writes inside the grant, and outside it with the
// grant's token and no scope). Finding the grant, checking the runs and pinning are one step on
// the owner: a close between two lookups once let a request skip both the run check and the pin.
#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
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
constexpr int kRounds = 1000;

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

using GrantFence = PoolTransportConformance;

TEST_P(GrantFence, NoByteLandsAfterCloseReturnsOrOutsideTheGrant) {
  if (!claims().other_processes) GTEST_SKIP() << transport() << " reaches no other process";
  // A pool with gaps is not offered on verbs (its keys cover whole spans); its grants' windows
  // are the NIC's fence (request_grant_nic_test.cpp).
  if (transport() == "verbs") GTEST_SKIP() << "verbs serves no pool with gaps";
  Connector owner(options_named("decode"));
  std::vector<std::byte> memory(kBlocks * kStride);
  auto pool = owner.register_pool({{memory.data(), kBlock, kStride, kBlocks, {}}});
  ChildProcess writer(
      {test::grant_writer_program(), std::to_string(kBlocks), std::to_string(kBlock)},
      peer_environment());
  std::vector<std::uint64_t> granted;
  for (std::uint64_t block = 0; block < kGranted; ++block) granted.push_back(block);
  std::mt19937 random(44);
  int after_close = 0, out_of_grant = 0;
  std::string first_seen;
  std::uint64_t landed = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto grant = pool.grant("writer", "req-" + std::to_string(round), granted, Access::Write, 30s);
    writer.write_line(grant.metadata().to_json());
    const auto started = expect_line(writer);
    ASSERT_EQ(started, "writing") << "round " << round;
    // Closes at a different point of the writer's stream each round.
    const auto spin = std::chrono::steady_clock::now() +
                      std::chrono::microseconds(std::uniform_int_distribution<int>(0, 200)(random));
    while (std::chrono::steady_clock::now() < spin) {
    }
    grant.close("round over");
    // Outside the grant nothing may have landed, ever; inside, what landed is the owner's now.
    auto outside_now = landed_in(memory, false);
    for (auto block : granted) std::memset(memory.data() + block * kStride, 0, kBlock);
    const auto stopped = expect_line(writer);
    ASSERT_EQ(stopped.rfind("stopped ", 0), 0u) << "round " << round << ": " << stopped;
    landed += std::stoull(stopped.substr(8));
    auto late = landed_in(memory, true);
    if (outside_now.empty()) outside_now = landed_in(memory, false);
    if (!late.empty()) ++after_close;
    if (!outside_now.empty()) ++out_of_grant;
    if (first_seen.empty() && !(late.empty() && outside_now.empty()))
      first_seen = "round " + std::to_string(round) + ": " + (late.empty() ? outside_now : late);
    std::memset(memory.data(), 0, memory.size());
  }
  writer.write_line("quit");
  EXPECT_EQ(writer.wait(10s), 0);
  EXPECT_EQ(after_close, 0) << "rounds with bytes landed after close() returned; first: "
                            << first_seen;
  EXPECT_EQ(out_of_grant, 0) << "rounds with bytes landed outside the grant; first: " << first_seen;
  // The hammer hit the grant: each round landed a write before the close.
  EXPECT_GE(landed, std::uint64_t{kRounds});
}

MEMWIRE_CONFORMANCE_SUITE(GrantFence);

}  // namespace
