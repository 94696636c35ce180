#include <gtest/gtest.h>

#include <filesystem>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"

using namespace memwire;
using namespace std::chrono_literals;

namespace {

struct Buffers {
  std::vector<std::vector<std::byte>> parts;
  std::vector<Descriptor> view() {
    std::vector<Descriptor> descriptors;
    for (auto& part : parts) descriptors.emplace_back(std::span(part));
    return descriptors;
  }
};

Buffers make_buffers(const std::vector<std::size_t>& sizes, std::optional<std::uint64_t> seed) {
  Buffers buffers;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    buffers.parts.emplace_back(sizes[i]);
    if (seed) test_support::fill_pattern(buffers.parts.back(), *seed + i);
  }
  return buffers;
}

void expect_pattern(const Buffers& buffers, std::uint64_t seed) {
  for (std::size_t i = 0; i < buffers.parts.size(); ++i) {
    auto bad = test_support::first_mismatch(buffers.parts[i], seed + i);
    EXPECT_EQ(bad, buffers.parts[i].size()) << "descriptor " << i << " differs at byte " << bad;
  }
}

ConnectorOptions transport_options(const std::string& transport, std::size_t chunk,
                                   unsigned connections) {
  ConnectorOptions options;
  options.transports = {transport};
  options.tcp.chunk_size = chunk;
  options.tcp.connections_per_peer = connections;
  return options;
}

// The stream transports' own promise (the transfer matrix and concurrency are in
// transport/conformance/, over every transport).
class StreamPooling : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(StreamPooling, ConnectionsArePooledAcrossOperations) {
  Connector owner(transport_options(GetParam(), 4096, 2));
  Connector reader(transport_options(GetParam(), 4096, 2));
  for (int round = 0; round < 50; ++round) {
    auto source = make_buffers({10000}, round);
    auto target = make_buffers({10000}, std::nullopt);
    auto readable = owner.create_readable(source.view());
    auto read = reader.begin_read(readable.metadata(), target.view());
    ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
    expect_pattern(target, round);
  }
  // 50 operations over 2 pooled connections: no endpoint per operation.
  auto fds = std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                           std::filesystem::directory_iterator());
  EXPECT_LT(fds, 40);
}

INSTANTIATE_TEST_SUITE_P(Transports, StreamPooling, ::testing::Values("tcp", "shm"));

TEST(TransportChoice, SameHostPeersPreferShmAndSaySo) {
  Connector owner, reader;  // default preference: verbs, shm, tcp
  auto source = make_buffers({100000}, 77);
  auto target = make_buffers({100000}, std::nullopt);
  auto readable = owner.create_readable(source.view());
  const auto metadata = readable.metadata();
  const auto& offers = metadata.endpoint().transports;
  ASSERT_GE(offers.size(), 2u);
  EXPECT_EQ(offers[offers.size() - 2].name, "shm");
  EXPECT_EQ(offers.back().name, "tcp");
  auto read = reader.begin_read(metadata, target.view());
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  if (offers.front().name != "verbs") {
    EXPECT_EQ(read.transport(), "shm");
  }
  expect_pattern(target, 77);
}

// Issue 23, finding 9: a connector reading its own readable stalled 5.1 s (the connect
// timeout) in the shm probe, then fell back to tcp: the dial held the pool's lock, which the
// acceptor answering that very probe needed.
TEST(TransportChoice, AConnectorReadsItsOwnReadableAtOnce) {
  ConnectorOptions options;
  options.transports = {"shm", "tcp"};
  Connector connector(options);
  auto source = make_buffers({4096}, 9);
  auto target = make_buffers({4096}, std::nullopt);
  auto readable = connector.create_readable(source.view());
  const auto began = std::chrono::steady_clock::now();
  auto read = connector.begin_read(readable.metadata(), target.view());
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 1s);
  EXPECT_EQ(read.transport(), "shm");
  expect_pattern(target, 9);
}

// Issue 23, finding 9: peers were told the bind address (or, for 0.0.0.0, the host's name),
// with no way to name the address they can actually reach (NAT, port-mapped containers).
TEST(TransportChoice, PeersAreToldTheAdvertisedAddress) {
  auto tcp_offer = [](ConnectorOptions options) {
    options.transports = {"tcp"};
    Connector connector(options);
    std::vector<std::byte> memory(64);
    auto readable = connector.create_readable({Descriptor(std::span(memory))});
    return readable.metadata().endpoint().transports.at(0).address;
  };
  ConnectorOptions mapped;
  mapped.advertise_address = "10.1.2.3:4567";
  EXPECT_EQ(tcp_offer(mapped), "10.1.2.3:4567");
  ConnectorOptions named;
  named.advertise_address = "peer.example";
  const auto address = tcp_offer(named);
  EXPECT_EQ(address.rfind("peer.example:", 0), 0u) << address;
  EXPECT_NE(address, "peer.example:0");
  ConnectorOptions wildcard;
  wildcard.bind_address = "0.0.0.0";
  Connector probe(wildcard);
  EXPECT_EQ(tcp_offer(wildcard).rfind(probe.hostname() + ":", 0), 0u);
}

TEST(TransportChoice, OtherBootIdMeansNoShm) {
  Connector owner, reader;
  auto source = make_buffers({1000}, 5);
  auto target = make_buffers({1000}, std::nullopt);
  auto readable = owner.create_readable(source.view());
  auto json = readable.metadata().to_json();
  auto at = json.find("\"boot_id\":\"");
  ASSERT_NE(at, std::string::npos);
  json[at + 11] = json[at + 11] == '0' ? '1' : '0';  // pretend another host
  auto read = reader.begin_read(RdmaMetadata::from_json(json), target.view());
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), "tcp");
  expect_pattern(target, 5);
}
