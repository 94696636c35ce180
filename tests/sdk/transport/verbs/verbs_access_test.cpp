// Access enforced by the NIC (issue 20): a peer gets remote keys for a registration only after
// presenting its token, they work from that peer's QP alone, and they end with the operation.
// An attacker here is a raw RC QP (support/raw_verbs_peer.hpp) connected to the owner's verbs
// listener, holding what any legitimate reader of readable A holds: A's metadata. Each test
// runs with type-2 memory windows and with the protection-domain-per-connection fallback, on
// every rail the owner offers. Needs an RDMA device (integration/rxe); skips elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"
#include "support/raw_verbs_peer.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using namespace memwire::test_support;

namespace {

bool rdma_available() {
  static const bool available = [] {
    try {
      Connector probe(verbs_owner_options("auto"));
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  return available;
}

bool all_equal(std::span<const std::byte> bytes, std::byte value) {
  return std::all_of(bytes.begin(), bytes.end(), [&](auto b) { return b == value; });
}

// The key guessing of issue 20: every rkey whose region index lies strictly between those of
// `below` and `above` (regions registered just before and after the owner registered its
// own: rxe hands indices out in sequence), with each of the 256 8-bit keys, one connection
// per guess since a wrong key breaks the QP. Returns the keys the device accepted.
struct Guesses {
  std::size_t tried = 0;
  std::vector<std::uint32_t> accepted;
};
Guesses guess_region_keys(const std::string& address, bool read, std::uint64_t remote,
                          std::size_t length, std::uint32_t below, std::uint32_t above) {
  Guesses guesses;
  std::vector<std::byte> local(length, std::byte{0x5a});
  for (std::uint32_t index = (below >> 8) + 1; index < (above >> 8) && index < (below >> 8) + 5;
       ++index)
    for (std::uint32_t key = 0; key < 256; ++key) {
      RawVerbsPeer attacker(address, "attacker");
      ++guesses.tried;
      if (attacker.access(read, local, remote, (index << 8) | key) == IBV_WC_SUCCESS)
        guesses.accepted.push_back((index << 8) | key);
    }
  return guesses;
}

class VerbsAccess : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!rdma_available()) GTEST_SKIP() << "no RDMA device (run under integration/rxe)";
    if (std::string(GetParam()) == "windows") {
      try {
        Connector probe(verbs_owner_options("windows"));
      } catch (const Error& error) {
        GTEST_SKIP() << "this device binds no type-2 memory windows: " << error.what();
      }
    }
  }
  ConnectorOptions options() const { return verbs_owner_options(GetParam()); }
};

TEST_P(VerbsAccess, NoRemoteKeyLeavesInTheMetadata) {
  Connector owner(options());
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  const auto metadata = readable.metadata();
  const auto& offer = metadata.endpoint().transports.at(0);
  EXPECT_EQ(offer.name, "verbs");
  EXPECT_TRUE(offer.keys.empty());
  for (const auto& [name, value] : offer.attributes)
    EXPECT_EQ(name.find("key"), std::string::npos) << name << " = " << value;
}

TEST_P(VerbsAccess, AKeyWorksOnlyOnTheConnectionItWasGrantedTo) {
  Connector owner(options());
  std::vector<std::byte> source(8192);
  fill_pattern(source, 41);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  // Every rail's reader lives to the end: losing one would fail the operation.
  std::vector<std::unique_ptr<RawVerbsPeer>> readers;
  for (const auto& address : rail_addresses(metadata)) {
    SCOPED_TRACE(address);
    auto& reader = *readers.emplace_back(std::make_unique<RawVerbsPeer>(address, "reader"));
    const auto grant = reader.begin(metadata);
    ASSERT_TRUE(grant.accepted) << "the owner refused a Begin with the right token";
    ASSERT_EQ(grant.rkeys.size(), 1u);
    // The control: on the connection that presented the token, the key reads.
    std::vector<std::byte> target(8192, std::byte{0});
    ASSERT_EQ(reader.access(true, target, metadata.descriptors()[0].ptr, grant.rkeys[0]),
              IBV_WC_SUCCESS);
    EXPECT_EQ(first_mismatch(target, 41), target.size());
    // The same key from another QP of the same peer host, which never presented the token.
    RawVerbsPeer other(address, "attacker");
    std::vector<std::byte> stolen(8192, std::byte{0xab});
    EXPECT_EQ(other.access(true, stolen, metadata.descriptors()[0].ptr, grant.rkeys[0]),
              IBV_WC_REM_ACCESS_ERR);
    EXPECT_TRUE(all_equal(stolen, std::byte{0xab})) << "another QP read with a granted key";
    // Begun, not completed; the refused QP did not fail it (the reader's own QP lives on).
    EXPECT_EQ(readable.status(), OperationStatus::InProgress);
  }
}

TEST_P(VerbsAccess, AWriteKeyWorksOnlyOnTheConnectionItWasGrantedTo) {
  Connector owner(options());
  std::vector<std::byte> memory(8192, std::byte{0x11});
  auto writable = owner.create_writable({Descriptor(std::span(memory))});
  const auto metadata = writable.metadata();
  const auto address = rail_addresses(metadata).back();
  RawVerbsPeer writer(address, "writer");
  const auto grant = writer.begin(metadata);
  ASSERT_TRUE(grant.accepted);
  RawVerbsPeer other(address, "attacker");
  std::vector<std::byte> payload(8192, std::byte{0x66});
  EXPECT_EQ(other.access(false, payload, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(all_equal(memory, std::byte{0x11})) << "another QP wrote with a granted key";
  fill_pattern(payload, 42);
  ASSERT_EQ(writer.access(false, payload, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_SUCCESS);
  EXPECT_EQ(first_mismatch(memory, 42), memory.size());
}

TEST_P(VerbsAccess, AGrantOfAReadableAllowsNoWrite) {
  Connector owner(options());
  std::vector<std::byte> memory(4096, std::byte{0x22});
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  const auto metadata = readable.metadata();
  RawVerbsPeer reader(rail_addresses(metadata).front());
  const auto grant = reader.begin(metadata);
  ASSERT_TRUE(grant.accepted);
  std::vector<std::byte> payload(4096, std::byte{0x33});
  EXPECT_EQ(reader.access(false, payload, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(all_equal(memory, std::byte{0x22}));
}

TEST_P(VerbsAccess, APeerHoldingAsMetadataCannotReadBOrWriteWByGuessing) {
  // The attack of issue 20: readables A and B and a writable W; the attacker holds A's
  // metadata and knows where B's and W's regions sit in the device's tables. On main before
  // the fix one of these guesses opened B (and W) for any QP.
  Connector owner(options());
  std::vector<std::byte> a(65536), b(65536), w(65536, std::byte{0x77});
  fill_pattern(a, 43);
  fill_pattern(b, 44);
  auto readable_a = owner.create_readable({Descriptor(std::span(a))});
  const auto metadata_a = readable_a.metadata();
  const auto address = rail_addresses(metadata_a).front();
  RawVerbsPeer prober(address, "attacker");
  const bool windows = std::string(GetParam()) == "windows";
  const auto before_b = prober.probe_region_rkey();
  const auto before_b_window = windows ? prober.probe_window_rkey() : 0;
  auto readable_b = owner.create_readable({Descriptor(std::span(b))});
  const auto after_b = prober.probe_region_rkey();
  const auto after_b_window = windows ? prober.probe_window_rkey() : 0;
  auto writable_w = owner.create_writable({Descriptor(std::span(w))});
  const auto after_w = prober.probe_region_rkey();

  // A legitimate grant of A, as any reader of A gets.
  const auto grant = prober.begin(metadata_a);
  ASSERT_TRUE(grant.accepted);
  const auto b_address = reinterpret_cast<std::uintptr_t>(b.data());
  const auto w_address = reinterpret_cast<std::uintptr_t>(w.data());
  const auto read_b = guess_region_keys(address, true, b_address, 4096, before_b, after_b);
  EXPECT_TRUE(read_b.accepted.empty()) << read_b.accepted.size() << " keys read B";
  // With windows, B's offer allocated its window already, unbound: it opens nothing.
  if (windows) {
    const auto unbound =
        guess_region_keys(address, true, b_address, 4096, before_b_window, after_b_window);
    EXPECT_TRUE(unbound.accepted.empty()) << unbound.accepted.size() << " keys read B unbound";
    EXPECT_GE(unbound.tried, 256u) << "the guesses missed B's window";
  }
  // A legitimate reader of B (with B's token) begins it: B's key now exists, for that
  // reader's QP alone (its window, bound now, or its region in that connection's PD, made
  // now). Guessed from the attacker's QPs, it is refused.
  RawVerbsPeer reader_of_b(address, "reader-of-b");
  const auto before_grant = windows ? before_b_window : prober.probe_region_rkey();
  ASSERT_TRUE(reader_of_b.begin(readable_b.metadata(), 1).accepted);
  const auto after_grant = windows ? after_b_window : prober.probe_region_rkey();
  const auto granted_b =
      guess_region_keys(address, true, b_address, 4096, before_grant, after_grant);
  EXPECT_TRUE(granted_b.accepted.empty()) << granted_b.accepted.size() << " keys read B";
  EXPECT_GE(granted_b.tried, 256u) << "the guesses missed the reader's key";
  const auto write_w = guess_region_keys(address, false, w_address, 4096, after_b, after_w);
  EXPECT_TRUE(write_w.accepted.empty()) << write_w.accepted.size() << " keys wrote W";
  EXPECT_TRUE(all_equal(w, std::byte{0x77})) << "W was written";
  // A's own granted key does not reach B or W either (another registration).
  std::vector<std::byte> local(4096, std::byte{0x5a});
  RawVerbsPeer reuse(address, "attacker");
  EXPECT_NE(reuse.access(true, local, b_address, grant.rkeys[0]), IBV_WC_SUCCESS);
  // With windows, B's and W's regions exist (for binds only) and the guesses cover them.
  if (std::string(GetParam()) == "windows") {
    EXPECT_GE(read_b.tried, 256u);
    EXPECT_GE(write_w.tried, 256u);
  }
  std::cout << "[          ] guesses: " << read_b.tried << " at B, " << granted_b.tried
            << " at B's grant to its reader, " << write_w.tried << " at W, none accepted\n";
  EXPECT_EQ(readable_b.status(), OperationStatus::InProgress);  // begun by its reader only
  EXPECT_EQ(writable_w.status(), OperationStatus::Initialized);
}

// One buffer cut into descriptors end to end is one region and one key (a window, or a region
// in the connection's PD): every descriptor's key reaches every byte of the buffer, and not one
// byte past it.
TEST_P(VerbsAccess, DescriptorsEndToEndShareOneKeyThatEndsWhereTheyEnd) {
  Connector owner(options());
  constexpr std::size_t kPieces = 16, kPiece = 4096;
  std::vector<std::byte> memory((kPieces + 1) * kPiece);  // the last piece is not offered
  fill_pattern(memory, 47);
  std::vector<Descriptor> pieces;
  for (std::size_t i = 0; i < kPieces; ++i) pieces.emplace_back(memory.data() + i * kPiece, kPiece);
  auto readable = owner.create_readable(pieces);
  const auto metadata = readable.metadata();
  RawVerbsPeer reader(rail_addresses(metadata).front());
  const auto grant = reader.begin(metadata);
  ASSERT_TRUE(grant.accepted);
  ASSERT_EQ(grant.rkeys.size(), kPieces);
  EXPECT_EQ(std::count(grant.rkeys.begin(), grant.rkeys.end(), grant.rkeys.front()),
            static_cast<std::ptrdiff_t>(kPieces))
      << "a key per descriptor";
  // The first descriptor's key reads the last descriptor.
  const auto base = reinterpret_cast<std::uintptr_t>(memory.data());
  std::vector<std::byte> local(kPiece);
  ASSERT_EQ(reader.access(true, local, base + (kPieces - 1) * kPiece, grant.rkeys.front()),
            IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(local.begin(), local.end(), memory.begin() + (kPieces - 1) * kPiece));
  // Half a page past the end: refused.
  EXPECT_NE(reader.access(true, local, base + kPieces * kPiece - kPiece / 2, grant.rkeys.front()),
            IBV_WC_SUCCESS)
      << "the key reached past the descriptors";
}

TEST_P(VerbsAccess, ReadingAWithoutBeginIsRefusedWhateverTheKey) {
  Connector owner(options());
  std::vector<std::byte> a(16384), other(4096);
  fill_pattern(a, 45);
  auto first = owner.create_readable({Descriptor(std::span(other))});
  RawVerbsPeer prober(rail_addresses(first.metadata()).front(), "attacker");
  const auto before = prober.probe_region_rkey();
  auto readable = owner.create_readable({Descriptor(std::span(a))});
  const auto after = prober.probe_region_rkey();
  const auto metadata = readable.metadata();
  const auto guesses = guess_region_keys(rail_addresses(metadata).front(), true,
                                         metadata.descriptors()[0].ptr, 4096, before, after);
  EXPECT_TRUE(guesses.accepted.empty()) << guesses.accepted.size() << " keys read A unbegun";
  if (std::string(GetParam()) == "windows") {
    EXPECT_GE(guesses.tried, 256u);
  }
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);
}

// A reader reads A under its granted key and sends Done, asking for a Result (`done_flag` 0) or
// for none (kDoneWithoutResult: a reader that completed on its own READs): the owner completes,
// answers as asked, and the key reads nothing more.
void read_finish_and_try_the_key_again(const ConnectorOptions& options, std::uint32_t done_flag) {
  Connector owner(options);
  std::vector<std::byte> source(8192);
  fill_pattern(source, 46);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  RawVerbsPeer reader(rail_addresses(metadata).front());
  const auto grant = reader.begin(metadata, 7);
  ASSERT_TRUE(grant.accepted);
  std::vector<std::byte> target(8192);
  ASSERT_EQ(reader.access(true, target, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_SUCCESS);
  EXPECT_EQ(target, source);
  if (done_flag == 0) {
    const auto result = reader.done(metadata, 7);
    ASSERT_TRUE(result.has_value()) << "no Result";
    EXPECT_FALSE(result->has_value()) << "the owner refused the Done";
  } else {
    const auto result = reader.done(metadata, 7, 500ms, done_flag);
    EXPECT_FALSE(result.has_value()) << "the owner answered a Done that asked for no Result";
  }
  ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
  std::vector<std::byte> late(8192, std::byte{0xab});
  EXPECT_EQ(reader.access(true, late, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(all_equal(late, std::byte{0xab})) << "a finished operation's key still read";
}

TEST_P(VerbsAccess, KeysOfAFinishedOperationAreRefused) {
  read_finish_and_try_the_key_again(options(), 0);
}

// One round trip less per READ: its Done asks for no Result.
TEST_P(VerbsAccess, AReadersDoneWithoutResultCompletesTheOwnerAndEndsTheKey) {
  read_finish_and_try_the_key_again(options(), detail::verbs::kDoneWithoutResult);
}

// A one-shot operation serves one transfer: the owner settles a race between two peers at
// Begin, before a byte moves, so a reader completes on its own READs without a Result and a
// second writer never writes over the first.
template <typename Operation>
void grant_to_one_transfer_only(Operation& operation, std::vector<std::byte>& memory, bool read) {
  const auto metadata = operation.metadata();
  const auto address = rail_addresses(metadata).front();
  RawVerbsPeer first(address, "first");
  const auto granted = first.begin(metadata, 1);
  ASSERT_TRUE(granted.accepted);
  RawVerbsPeer second(address, "second");
  const auto refused = second.begin(metadata, 1);
  EXPECT_FALSE(refused.accepted) << "a second peer was granted a one-shot operation";
  EXPECT_EQ(refused.error, ErrorCode::Cancelled);
  EXPECT_TRUE(std::all_of(refused.rkeys.begin(), refused.rkeys.end(), [](std::uint32_t rkey) {
    return rkey == 0;
  })) << "a refused peer was sent keys";
  // The refusal leaves the first transfer alone: it finishes, and the owner completes.
  std::vector<std::byte> local(memory.size());
  fill_pattern(local, 48);
  ASSERT_EQ(first.access(read, local, metadata.descriptors()[0].ptr, granted.rkeys.at(0)),
            IBV_WC_SUCCESS);
  const auto result = first.done(metadata, 1);
  ASSERT_TRUE(result.has_value()) << "no Result";
  EXPECT_FALSE(result->has_value()) << "the owner refused the first transfer's Done";
  EXPECT_EQ(operation.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(local, memory);
}

TEST_P(VerbsAccess, AOneShotOperationIsGrantedToOneTransferOnly) {
  Connector owner(options());
  std::vector<std::byte> source(8192);
  fill_pattern(source, 47);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  grant_to_one_transfer_only(readable, source, true);
  std::vector<std::byte> destination(8192, std::byte{0x11});
  auto writable = owner.create_writable({Descriptor(std::span(destination))});
  grant_to_one_transfer_only(writable, destination, false);
}

TEST_P(VerbsAccess, KeysOfACancelledOperationAreRefused) {
  Connector owner(options());
  std::vector<std::byte> memory(8192, std::byte{0x11});
  auto writable = owner.create_writable({Descriptor(std::span(memory))});
  const auto metadata = writable.metadata();
  RawVerbsPeer writer(rail_addresses(metadata).front());
  const auto grant = writer.begin(metadata);
  ASSERT_TRUE(grant.accepted);
  writable.cancel();
  std::vector<std::byte> payload(8192, std::byte{0xee});
  EXPECT_EQ(writer.access(false, payload, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(all_equal(memory, std::byte{0x11})) << "a cancelled operation's key still wrote";
}

TEST_P(VerbsAccess, KeysOfAnExpiredOperationAreRefused) {
  auto expiring = options();
  expiring.metadata_ttl = 1500ms;
  Connector owner(expiring);
  std::vector<std::byte> source(8192);
  fill_pattern(source, 47);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  RawVerbsPeer reader(rail_addresses(metadata).front());
  const auto grant = reader.begin(metadata);
  ASSERT_TRUE(grant.accepted);
  std::vector<std::byte> target(8192);
  ASSERT_EQ(reader.access(true, target, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_SUCCESS);
  // Past the expiry (the owner's timer ends the grant, no access needed to notice).
  std::this_thread::sleep_until(
      std::chrono::system_clock::time_point(std::chrono::milliseconds(metadata.expires_at_ms())) +
      300ms);
  std::vector<std::byte> late(8192, std::byte{0xab});
  EXPECT_EQ(reader.access(true, late, metadata.descriptors()[0].ptr, grant.rkeys[0]),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(all_equal(late, std::byte{0xab})) << "an expired operation's key still read";
}

TEST_P(VerbsAccess, ABeginOfAnotherOperationsKeyWithoutItsTokenIsRefused) {
  Connector owner(options());
  std::vector<std::byte> a(4096), b(4096);
  auto readable_a = owner.create_readable({Descriptor(std::span(a))});
  auto readable_b = owner.create_readable({Descriptor(std::span(b))});
  // B's key (say, guessed or seen) with A's token: refused, and no key granted.
  auto forged = RdmaMetadata::from_json(readable_b.metadata().to_json());
  const auto a_metadata = readable_a.metadata();
  auto fields = forged.fields();
  fields.token = a_metadata.token();
  RdmaMetadata mixed(std::move(fields));
  RawVerbsPeer attacker(rail_addresses(a_metadata).front(), "attacker");
  const auto grant = attacker.begin(mixed);
  EXPECT_FALSE(grant.accepted);
  EXPECT_EQ(grant.error, ErrorCode::AccessDenied);
  EXPECT_TRUE(std::all_of(grant.rkeys.begin(), grant.rkeys.end(), [](auto k) { return k == 0; }));
}

TEST_P(VerbsAccess, ASourceThatKeepsFaultingIsRefused) {
  auto limited = options();
  limited.rdma.max_access_faults = 3;
  std::mutex mutex;
  std::vector<std::string> warnings;
  limited.log_level = LogLevel::Warn;
  limited.log = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    warnings.emplace_back(line);
  };
  Connector owner(limited);
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  const auto metadata = readable.metadata();
  const auto address = rail_addresses(metadata).front();
  int refused_at = 0;
  for (int attempt = 1; attempt <= 12 && refused_at == 0; ++attempt) {
    try {
      RawVerbsPeer guesser(address, "innocent-name");
      std::vector<std::byte> local(4096);
      EXPECT_NE(guesser.access(true, local, metadata.descriptors()[0].ptr, 0x1200u + attempt),
                IBV_WC_SUCCESS);
      // The owner counts the fault once its side of the QP failed: before the next attempt.
      guesser.disconnected_within(2s);
    } catch (const std::runtime_error&) {
      refused_at = attempt;
    }
  }
  EXPECT_GE(refused_at, 4) << "refused before the limit";
  EXPECT_LE(refused_at, 6) << "not refused after the limit";
  // Refused for the window, not for one attempt.
  EXPECT_THROW(RawVerbsPeer(address, "innocent-name"), std::runtime_error);
  const auto telemetry = owner.telemetry();
  EXPECT_GE(telemetry.peer_faults, 3u);
  EXPECT_GE(telemetry.refused_connections, 2u);
  const auto host = address.substr(0, address.rfind(':'));
  std::lock_guard lock(mutex);
  const auto logged = std::count_if(warnings.begin(), warnings.end(), [&](const std::string& l) {
    return l.find("\"peer_fault\"") != std::string::npos && l.find(host) != std::string::npos &&
           l.find("\"warn\"") != std::string::npos;
  });
  EXPECT_GE(logged, 3) << "faults not logged at warn level with the source address";
}

INSTANTIATE_TEST_SUITE_P(Access, VerbsAccess, ::testing::Values("windows", "connection_pd"),
                         [](const auto& info) { return std::string(info.param); });

TEST(VerbsAccessLimits, KeysHeldOnOneConnectionAreBounded) {
  if (!rdma_available()) GTEST_SKIP() << "no RDMA device (run under integration/rxe)";
  // A peer holding tokens cannot pile up the device's windows (or regions) on one connection:
  // past 65,536 keys its next Begin is refused, and the keys it holds still work. (Slow under
  // TCG, tens of seconds: one access mode, one rail.)
  Connector owner(verbs_owner_options("auto"));
  constexpr std::size_t kDescriptors = 33000;
  std::vector<std::byte> memory(kDescriptors);
  std::vector<Descriptor> descriptors;
  for (std::size_t i = 0; i < kDescriptors; ++i) descriptors.emplace_back(&memory[i], 1);
  auto first = owner.create_readable(descriptors);
  auto second = owner.create_readable(descriptors);
  const auto metadata = first.metadata();
  RawVerbsPeer reader(rail_addresses(metadata).front());
  const auto granted = reader.begin(metadata, 1, 120s);
  ASSERT_TRUE(granted.accepted);
  const auto refused = reader.begin(second.metadata(), 2, 120s);
  EXPECT_FALSE(refused.accepted);
  EXPECT_EQ(refused.error, ErrorCode::Transport);
  std::vector<std::byte> one(1);
  EXPECT_EQ(reader.access(true, one, metadata.descriptors().back().ptr, granted.rkeys.back()),
            IBV_WC_SUCCESS);
}

TEST(VerbsAccessLimits, AnUnknownAccessModeKeepsVerbsFromStarting) {
  // Never a silent fallback to one shared protection domain: the verbs transport refuses to
  // start, and says why.
  if (!rdma_available()) GTEST_SKIP() << "no RDMA device (run under integration/rxe)";
  auto options = verbs_owner_options("shared");
  options.transports = {"verbs", "tcp"};
  std::mutex mutex;
  std::string lines;
  options.log = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    lines += std::string(line) + "\n";
  };
  Connector owner(options);
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  EXPECT_EQ(readable.metadata().endpoint().transports.at(0).name, "tcp");
  std::lock_guard lock(mutex);
  EXPECT_NE(lines.find("rdma.access must be auto, windows or connection_pd"), std::string::npos)
      << lines;
}

}  // namespace
