// The verbs transport for real: RDMA READ/WRITE over RC queue pairs. Needs an RDMA device with
// an active port (Soft-RoCE in the integration/rxe guest); skips elsewhere.
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"
#include "support/raw_verbs_peer.hpp"
#include "transport/verbs/verbs_wire.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using namespace memwire::test_support;

namespace {

ConnectorOptions verbs_options() {
  ConnectorOptions options;
  options.transports = {"verbs"};
  options.connect_timeout = 5s;
  if (const char* access = std::getenv("MEMWIRE_TEST_ACCESS")) options.rdma.access = access;
  // MEMWIRE_TEST_LOG=1: the connectors' own lines on stderr, to see why a test failed.
  if (std::getenv("MEMWIRE_TEST_LOG") != nullptr) {
    options.log_level = LogLevel::Debug;
    options.log = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
  return options;
}

bool rdma_available() {
  static const bool available = [] {
    try {
      Connector probe(verbs_options());
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  return available;
}

#define REQUIRE_RDMA() \
  if (!rdma_available()) GTEST_SKIP() << "no RDMA device (run under integration/rxe)"

const TransportOffer& verbs_offer(const RdmaMetadata& metadata) {
  return metadata.endpoint().transports.at(0);
}

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// ---- selection, pooling, concurrency ------------------------------------------------------

TEST(VerbsTransport, IsPreferredAndSaysSo) {
  REQUIRE_RDMA();
  ConnectorOptions options;
  options.transports = {"verbs", "tcp"};
  Connector owner(options), peer(options);
  EXPECT_EQ(owner.transports(), (std::vector<std::string>{"verbs", "tcp"}));
  std::vector<std::byte> source(4096), target(4096);
  fill_pattern(source, 7);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  const auto& offers = metadata.endpoint().transports;
  ASSERT_EQ(offers.size(), 2u);
  EXPECT_EQ(offers[0].name, "verbs");
  EXPECT_EQ(offers[1].name, "tcp");
  auto read = peer.begin_read(metadata, {Descriptor(std::span(target))});
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), "verbs");
  EXPECT_EQ(first_mismatch(target, 7), target.size());
}

TEST(VerbsTransport, FallsBackToTcpWhenThePeerHasNoVerbs) {
  REQUIRE_RDMA();
  ConnectorOptions tcp_only;
  tcp_only.transports = {"tcp"};
  ConnectorOptions both;
  both.transports = {"verbs", "tcp"};
  Connector owner(tcp_only), peer(both);
  std::vector<std::byte> source(4096), target(4096);
  fill_pattern(source, 8);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = peer.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), "tcp");
}

// RC QPs of this process, as the kernel's RDMA resource tracking lists them ("... type RC ...
// pid N ...", N being the thread that created the QP); nullopt when the `rdma` tool is
// unavailable. `listing` gets the raw output.
std::optional<int> rc_queue_pairs_of_this_process(std::string* listing = nullptr) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen("rdma resource show qp 2>/dev/null", "r"),
                                             ::pclose);
  if (!pipe) return std::nullopt;
  std::vector<std::string> ours;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
    ours.push_back(" pid " + task.path().filename().string() + " ");
  int count = 0;
  bool any = false;
  char line[1024];
  while (std::fgets(line, sizeof line, pipe.get()) != nullptr) {
    any = true;
    const std::string text(line);
    if (listing != nullptr) *listing += text;
    if (text.find(" type RC ") != std::string::npos &&
        std::any_of(ours.begin(), ours.end(),
                    [&](const auto& pid) { return text.find(pid) != std::string::npos; }))
      ++count;
  }
  if (!any) return std::nullopt;
  return count;
}

TEST(VerbsTransport, ManyConcurrentOperationsShareOneQueuePair) {
  REQUIRE_RDMA();
  constexpr int kOperations = 64;
  constexpr std::size_t kSize = 256 * KiB + 11;
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::vector<std::byte>> sources, targets, written;
  std::vector<ReadableOperation> readables;
  std::vector<WritableOperation> writables;
  for (int i = 0; i < kOperations; ++i) {
    sources.emplace_back(kSize);
    targets.emplace_back(kSize);
    written.emplace_back(kSize);
    fill_pattern(sources.back(), 1000 + i);
    readables.push_back(owner.create_readable({Descriptor(std::span(sources.back()))}));
    writables.push_back(owner.create_writable({Descriptor(std::span(written.back()))}));
  }
  // Reads and writes interleaved, all begun before any is waited for.
  std::vector<ReadOperation> reads;
  std::vector<WriteOperation> writes;
  for (int i = 0; i < kOperations; ++i) {
    reads.push_back(peer.begin_read(readables[i].metadata(), {Descriptor(std::span(targets[i]))}));
    writes.push_back(
        peer.begin_write({Descriptor(std::span(sources[i]))}, writables[i].metadata()));
  }
  for (int i = 0; i < kOperations; ++i) {
    EXPECT_EQ(reads[i].wait_for_completion(120s), OperationStatus::Complete) << i;
    EXPECT_EQ(writes[i].wait_for_completion(120s), OperationStatus::Complete) << i;
    EXPECT_EQ(readables[i].wait_for_completion(10s), OperationStatus::Complete) << i;
    EXPECT_EQ(writables[i].wait_for_completion(10s), OperationStatus::Complete) << i;
    EXPECT_EQ(first_mismatch(targets[i], 1000 + i), kSize) << i;
    EXPECT_EQ(first_mismatch(written[i], 1000 + i), kSize) << i;
  }
  // One connection between the two connectors: its two ends are the only RC QPs we own.
  std::string listing;
  if (auto count = rc_queue_pairs_of_this_process(&listing)) {
    EXPECT_EQ(*count, 2) << "operations did not share one pooled queue pair:\n" << listing;
  } else {
    std::cout << "note: `rdma resource show qp` unavailable, QP count not checked\n";
  }
}

TEST(VerbsTransport, ConnectionIsReusedAcrossOperations) {
  REQUIRE_RDMA();
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::byte> source(64 * KiB), target(64 * KiB);
  for (int round = 0; round < 20; ++round) {
    fill_pattern(source, 50 + round);
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    auto read = peer.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    ASSERT_EQ(first_mismatch(target, 50 + round), target.size()) << round;
  }
  std::string listing;
  if (auto count = rc_queue_pairs_of_this_process(&listing)) {
    EXPECT_EQ(*count, 2) << listing;
  }
}

// A thread waiting for a small READ reads its completions itself (Engine::drive): the READ's
// callbacks run on it, not on the progress thread that would otherwise wake it. Not always:
// the progress thread may have the answer first (it arrived before the wait began).
TEST(VerbsTransport, ASmallReadsWaiterReadsItsOwnCompletions) {
  REQUIRE_RDMA();
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::byte> source(4 * KiB), target(4 * KiB);
  constexpr int kReads = 16;
  int on_the_waiter = 0;
  for (int round = 0; round < kReads; ++round) {
    fill_pattern(source, 70 + round);
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    auto read = peer.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    std::thread::id ran_on;
    read.on_complete([&](OperationStatus) { ran_on = std::this_thread::get_id(); });
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    ASSERT_EQ(first_mismatch(target, 70 + round), target.size()) << round;
    if (ran_on == std::this_thread::get_id()) ++on_the_waiter;
    ASSERT_EQ(readable.wait_for_completion(30s), OperationStatus::Complete);
  }
  EXPECT_GE(on_the_waiter, kReads / 2) << "the progress thread ended most READs";
}

// ---- refusals ------------------------------------------------------------------------------
// (forged tokens, ended operations, cancels on either side, lost peers and the transfer matrix
// are the conformance suite's, over every transport: tests/sdk/transport/conformance/)

TEST(VerbsTransport, ConnectionsOverThePerPeerLimitAreRefused) {
  REQUIRE_RDMA();
  auto owner_options = verbs_options();
  owner_options.max_connections_per_peer = 1;
  Connector owner(owner_options), first(verbs_options()), second(verbs_options());
  std::vector<std::byte> source(4096), a(4096), b(4096);
  fill_pattern(source, 9);
  auto one = owner.create_readable({Descriptor(std::span(source))});
  auto other = owner.create_readable({Descriptor(std::span(source))});
  auto read = first.begin_read(one.metadata(), {Descriptor(std::span(a))});
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  auto refused = second.begin_read(other.metadata(), {Descriptor(std::span(b))});
  EXPECT_THROW(refused.wait_for_completion(30s), Error);
  EXPECT_EQ(refused.status(), OperationStatus::Errored);
}

// ---- revocation: a late RDMA access fails on the device --------------------------------------
// (the keys granted per connection, and every way they end, are in verbs_access_test.cpp)

bool all_equal(std::span<const std::byte> bytes, std::byte value) {
  return std::all_of(bytes.begin(), bytes.end(), [&](auto b) { return b == value; });
}

TEST(VerbsRevocation, AMemwireReadLeavesNoKeyToBeginAfterIt) {
  REQUIRE_RDMA();
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::byte> source(8192), target(8192);
  fill_pattern(source, 12);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  auto read = peer.begin_read(metadata, {Descriptor(std::span(target))});
  ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
  RawVerbsPeer again(verbs_offer(metadata).address);
  EXPECT_EQ(again.begin(metadata, 2).error, ErrorCode::NotFound);
  EXPECT_EQ(first_mismatch(source, 12), source.size());
}

// A peer that began the operation first holds it: a memwire reader coming second is told so,
// and the first peer's keys keep working until the owner ends the operation.
TEST(VerbsRevocation, AMemwireReaderLosesToATransferThatBeganFirst) {
  REQUIRE_RDMA();
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::byte> source(8192), target(8192, std::byte{0xab});
  fill_pattern(source, 13);
  std::optional<ReadableOperation> readable =
      owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable->metadata();
  RawVerbsPeer raw(verbs_offer(metadata).address);
  const auto grant = raw.begin(metadata);
  ASSERT_TRUE(grant.accepted);
  try {
    auto read = peer.begin_read(metadata, {Descriptor(std::span(target))});
    read.wait_for_completion(30s);
    ADD_FAILURE() << "the second reader completed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Cancelled) << error.what();
    EXPECT_NE(std::string(error.what()).find("another transfer"), std::string::npos)
        << error.what();
  }
  EXPECT_TRUE(all_equal(target, std::byte{0xab})) << "the refused reader received bytes";
  EXPECT_EQ(readable->status(), OperationStatus::InProgress);
  std::vector<std::byte> bytes(8192);
  EXPECT_EQ(raw.access(true, bytes, metadata.descriptors()[0].ptr, grant.rkeys[0]), IBV_WC_SUCCESS);
  EXPECT_EQ(bytes, source);
  readable.reset();  // the owner ends it: the first peer's key ends with it
  std::vector<std::byte> late(8192, std::byte{0xab});
  EXPECT_EQ(raw.access(true, late, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(all_equal(late, std::byte{0xab})) << "the late READ delivered bytes";
}

TEST(VerbsRevocation, GarbageFromAPeerClosesOnlyItsConnection) {
  REQUIRE_RDMA();
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::byte> source(4096), target(4096);
  fill_pattern(source, 32);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  {
    RawVerbsPeer raw(verbs_offer(metadata).address);
    std::vector<std::byte> garbage(64, std::byte{0x7f});
    EXPECT_EQ(raw.send(garbage), IBV_WC_SUCCESS);
    // The owner drops that connection. Closed before it saw the connection established, it
    // cannot send a DREQ; the peer then learns on its next request.
    if (!raw.disconnected_within(10s)) {
      EXPECT_FALSE(raw.begin(metadata).accepted) << "the owner kept talking to a garbage peer";
    }
  }
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);
  auto read = peer.begin_read(metadata, {Descriptor(std::span(target))});
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 32), target.size());
}

}  // namespace

// ---- throughput ----------------------------------------------------------------------------

namespace {

// Not a correctness test: the figure integration/rxe/run-tests puts next to ib_read_bw in the
// same guest boot. MiB/s, as perftest counts. Each round is one whole operation (Begin,
// READs, Done, Result), so the protocol's round trips are part of the figure.
TEST(VerbsThroughput, Read) {
  REQUIRE_RDMA();
  constexpr std::size_t kSize = 64 * MiB;
  constexpr int kRounds = 4;
  Connector owner(verbs_options()), peer(verbs_options());
  std::vector<std::byte> source(kSize), target(kSize);
  fill_pattern(source, 77);
  std::chrono::duration<double> spent{};
  for (int round = 0; round < kRounds; ++round) {
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    const auto metadata = readable.metadata();
    const auto began = std::chrono::steady_clock::now();
    auto read = peer.begin_read(metadata, {Descriptor(std::span(target))});
    ASSERT_EQ(read.wait_for_completion(120s), OperationStatus::Complete);
    spent += std::chrono::steady_clock::now() - began;
  }
  ASSERT_EQ(first_mismatch(target, 77), kSize);
  const double mib_per_s = static_cast<double>(kSize) * kRounds / MiB / spent.count();
  std::printf("memwire-verbs-read-bw: %.2f MiB/s (%d x %zu bytes in %.3f s)\n", mib_per_s, kRounds,
              kSize, spent.count());
  RecordProperty("read_mib_per_s", std::to_string(mib_per_s));
}

}  // namespace
