// Multi-rail verbs for real: two Soft-RoCE devices in the rxe guest (`run-tests --rails 2`:
// rxe0 on dummy0 10.0.0.1, rxe1 on dummy1 10.0.1.1). Transfers striped over both, a rail
// taken down mid-transfer, a one-rail peer. Skips with fewer than two rails; the offer format
// tests need no device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"
#include "transport/verbs/rail_offer.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::test_support::fill_pattern;
using memwire::test_support::first_mismatch;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// The messages of one connector's log lines (declared before it: the sink must outlive it).
// Each line is a JSON object; its "msg" is what the transport said.
class LogLines {
 public:
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view line) {
      const auto object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      std::lock_guard lock(mutex_);
      if (object.is_object() && object.contains("msg") && object["msg"].is_string())
        lines_.push_back(object["msg"].get<std::string>());
      else
        lines_.emplace_back(line);
    };
  }
  std::string all() {
    std::lock_guard lock(mutex_);
    std::string text;
    for (const auto& line : lines_) text += "\n  " + line;
    return text;
  }
  std::vector<std::string> starting_with(std::string_view prefix) {
    std::lock_guard lock(mutex_);
    std::vector<std::string> found;
    for (const auto& line : lines_)
      if (line.starts_with(prefix)) found.push_back(line);
    return found;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

ConnectorOptions rail_options(LogLines& log, std::vector<std::string> devices = {}) {
  ConnectorOptions options;
  options.transports = {"verbs"};
  options.connect_timeout = 5s;
  options.rdma.devices = std::move(devices);
  options.log = log.sink();
  return options;
}

bool two_rails() {
  static const bool available = [] {
    try {
      LogLines log;
      Connector probe(rail_options(log));
      return log.starting_with("verbs: rail 1:").size() == 1;
    } catch (const Error&) {
      return false;
    }
  }();
  return available;
}

#define REQUIRE_TWO_RAILS() \
  if (!two_rails())         \
  GTEST_SKIP() << "fewer than two RDMA rails (integration/rxe/run-tests --rails 2)"

// Bytes `device` moved in the last transfer the log reports ("verbs: transfer N rails
// rxe0=XB/S rxe1=YB/S ..."); -1 when there is none.
long long rail_bytes(LogLines& log, const std::string& device) {
  const auto lines = log.starting_with("verbs: transfer ");
  for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
    if (line->find(" rails ") == std::string::npos) continue;
    std::smatch match;
    if (std::regex_search(*line, match, std::regex(" " + device + "=([0-9]+)B/")))
      return std::stoll(match[1]);
    return 0;
  }
  return -1;
}

// Brings a link down for the test and up again whatever happens.
class LinkDown {
 public:
  explicit LinkDown(std::string netdev) : netdev_(std::move(netdev)) {
    ok_ = std::system(("ip link set " + netdev_ + " down").c_str()) == 0;
  }
  ~LinkDown() {
    [[maybe_unused]] int status = std::system(("ip link set " + netdev_ + " up").c_str());
    // Until the port and its GID are back (bounded): later tests need the rail.
    for (int i = 0; i < 100; ++i) {
      if (std::system("grep -q ACTIVE /sys/class/infiniband/rxe1/ports/1/state") == 0) break;
      std::this_thread::sleep_for(100ms);
    }
    std::this_thread::sleep_for(500ms);
  }
  bool ok() const { return ok_; }

 private:
  std::string netdev_;
  bool ok_ = false;
};

// ---- the offer: each rail's address, readable by a single-rail peer, and no key ------------

TEST(RailOffer, FirstRailIsTheClassicOfferAndTheRestAreAttributes) {
  TransportOffer offer{"verbs", {}, {}, {}};
  memwire::detail::verbs::add_rail(offer, 0, "10.0.0.1:4000");
  memwire::detail::verbs::add_rail(offer, 1, "10.0.1.1:4001");
  EXPECT_EQ(offer.address, "10.0.0.1:4000");
  EXPECT_TRUE(offer.keys.empty()) << "a remote key in the offer opens the memory to any peer";
  const auto rails = memwire::detail::verbs::rails_of(offer);
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(rails[1].address, "10.0.1.1:4001");
  // Through the metadata's JSON and back: nixl_connect's field names, rails in attributes.
  RdmaMetadata metadata({.kind = OperationKind::Read,
                         .descriptors = {{Device(), 4096, 2}, {Device(), 8192, 3}},
                         .notification_key = std::string(32, 'a'),
                         .endpoint = {"c", "h", {offer}},
                         .token = std::string(32, 'b'),
                         .expires_at_ms = 0});
  const auto again = RdmaMetadata::from_json(metadata.to_json());
  EXPECT_EQ(memwire::detail::verbs::rails_of(again.endpoint().transports.at(0)).size(), 2u);
}

TEST(RailOffer, ASingleDeviceOfferIsOneRail) {
  const TransportOffer offer{"verbs", "10.0.0.1:4000", {}, {}};
  const auto rails = memwire::detail::verbs::rails_of(offer);
  ASSERT_EQ(rails.size(), 1u);
  EXPECT_EQ(rails[0].address, "10.0.0.1:4000");
}

TEST(RailOffer, MalformedRailsAndOfferedKeysAreInvalidMetadata) {
  const auto code_of = [](const TransportOffer& offer) {
    try {
      memwire::detail::verbs::rails_of(offer);
    } catch (const Error& error) {
      return error.code();
    }
    return ErrorCode::Protocol;  // no error
  };
  TransportOffer offer{"verbs", "10.0.0.1:4000", {}, {}};
  offer.attributes = {{"rail1", "somewhere"}};
  EXPECT_EQ(code_of(offer), ErrorCode::InvalidMetadata);
  offer.attributes = {};
  offer.address = "nowhere";
  EXPECT_EQ(code_of(offer), ErrorCode::InvalidMetadata);
  // An owner of protocol 1 put its rkeys in the offer: not spoken (and not trusted) any more.
  offer.address = "10.0.0.1:4000";
  offer.keys = {1, 2};
  EXPECT_EQ(code_of(offer), ErrorCode::InvalidMetadata);
}

// ---- two rails for real ---------------------------------------------------------------------

TEST(VerbsRails, ALargeReadIsStripedOverBothRails) {
  REQUIRE_TWO_RAILS();
  LogLines owner_log, reader_log;
  Connector owner(rail_options(owner_log)), reader(rail_options(reader_log));
  std::vector<std::byte> source(32 * MiB + 5), target(32 * MiB + 5);
  fill_pattern(source, 11);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  EXPECT_EQ(metadata.endpoint().transports.at(0).attributes.count("rail1"), 1u);
  auto read = reader.begin_read(metadata, {Descriptor(std::span(target))});
  ASSERT_EQ(read.wait_for_completion(120s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 11), target.size());
  EXPECT_GT(rail_bytes(reader_log, "rxe0"), 0);
  EXPECT_GT(rail_bytes(reader_log, "rxe1"), 0) << reader_log.all();
  EXPECT_EQ(rail_bytes(reader_log, "rxe0") + rail_bytes(reader_log, "rxe1"),
            static_cast<long long>(target.size()));
}

TEST(VerbsRails, ALargeWriteIsStripedOverBothRails) {
  REQUIRE_TWO_RAILS();
  LogLines owner_log, writer_log;
  Connector owner(rail_options(owner_log)), writer(rail_options(writer_log));
  std::vector<std::byte> source(24 * MiB + 3), target(24 * MiB + 3);
  fill_pattern(source, 12);
  auto writable = owner.create_writable({Descriptor(std::span(target))});
  auto write = writer.begin_write({Descriptor(std::span(source))}, writable.metadata());
  ASSERT_EQ(write.wait_for_completion(120s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 12), target.size());
  EXPECT_GT(rail_bytes(writer_log, "rxe0"), 0);
  EXPECT_GT(rail_bytes(writer_log, "rxe1"), 0) << writer_log.all();
}

TEST(VerbsRails, ASmallReadGoesOnOneRail) {
  REQUIRE_TWO_RAILS();
  LogLines owner_log, reader_log;
  Connector owner(rail_options(owner_log)), reader(rail_options(reader_log));
  std::vector<std::byte> source(64 * KiB), target(64 * KiB);
  fill_pattern(source, 13);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  ASSERT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 13), target.size());
  const auto on0 = rail_bytes(reader_log, "rxe0"), on1 = rail_bytes(reader_log, "rxe1");
  EXPECT_TRUE((on0 == 0) != (on1 == 0)) << "rxe0 " << on0 << " B, rxe1 " << on1 << " B";
}

TEST(VerbsRails, AOneRailOwnerPairsWithTheReadersMatchingRail) {
  REQUIRE_TWO_RAILS();
  LogLines owner_log, reader_log;
  Connector owner(rail_options(owner_log, {"rxe1"})), reader(rail_options(reader_log));
  std::vector<std::byte> source(8 * MiB), target(8 * MiB);
  fill_pattern(source, 14);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  EXPECT_TRUE(metadata.endpoint().transports.at(0).attributes.empty()) << "a single-rail offer";
  auto read = reader.begin_read(metadata, {Descriptor(std::span(target))});
  ASSERT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 14), target.size());
  EXPECT_EQ(rail_bytes(reader_log, "rxe1"), static_cast<long long>(target.size()));
}

TEST(VerbsRails, AOneRailReaderReadsFromATwoRailOwner) {
  REQUIRE_TWO_RAILS();
  LogLines owner_log, reader_log;
  Connector owner(rail_options(owner_log)), reader(rail_options(reader_log, {"rxe0"}));
  std::vector<std::byte> source(8 * MiB), target(8 * MiB);
  fill_pattern(source, 15);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  ASSERT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 15), target.size());
  EXPECT_EQ(rail_bytes(reader_log, "rxe0"), static_cast<long long>(target.size()));
}

TEST(VerbsRails, ARailTakenDownMidReadHandsItsSlicesToTheOther) {
  REQUIRE_TWO_RAILS();
  LogLines owner_log, reader_log;
  Connector owner(rail_options(owner_log)), reader(rail_options(reader_log));
  std::vector<std::byte> source(64 * MiB), target(64 * MiB);
  fill_pattern(source, 16);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  // Once bytes move (a 64 MiB read takes seconds under TCG), rxe1's link goes.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (read.status() != OperationStatus::InProgress && !is_terminal(read.status()) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(500ms);
  ASSERT_FALSE(is_terminal(read.status())) << "the read ended before the link went down";
  {
    LinkDown down("dummy1");
    ASSERT_TRUE(down.ok());
    ASSERT_EQ(read.wait_for_completion(90s), OperationStatus::Complete);
  }
  EXPECT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 16), target.size()) << "a byte is wrong after the failover";
  const auto lost = reader_log.starting_with("verbs: transfer ");
  EXPECT_TRUE(std::any_of(lost.begin(), lost.end(),
                          [](const auto& line) {
                            return line.find("lost its leg on rxe1") != std::string::npos;
                          }) ||
              !owner_log.starting_with("peer lost: verbs: rxe1 port").empty())
      << "nobody noticed the rail going down";
  EXPECT_GT(rail_bytes(reader_log, "rxe0"), 0);

  std::cout << "reader:" << reader_log.all() << "\nowner:" << owner_log.all() << std::endl;
}

}  // namespace
