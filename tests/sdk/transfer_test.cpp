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

struct Shape {
  std::vector<std::size_t> sizes;
  std::size_t chunk;
  unsigned connections;
};

void PrintTo(const Shape& shape, std::ostream* out) {
  *out << shape.sizes.size() << " descriptors";
}

// `count` blocks, the first of `size` bytes, each next one `step` bytes larger (cycling back
// after `cycle`): KV-cache-shaped descriptor lists.
std::vector<std::size_t> blocks(std::size_t count, std::size_t size, std::size_t step = 0,
                                std::size_t cycle = 1) {
  std::vector<std::size_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) sizes[i] = size + step * (i % cycle);
  return sizes;
}

using Case = std::tuple<std::string, Shape>;  // transport, shape

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& [transport, shape] = info.param;
  std::string name = transport + "_";
  if (shape.sizes.size() > 8) {  // KV-cache-shaped: the count and the first size say enough
    name +=
        std::to_string(shape.sizes.size()) + "blocks_from" + std::to_string(shape.sizes[0]) + "_";
  } else {
    for (auto size : shape.sizes) name += std::to_string(size) + "_";
  }
  return name + "chunk" + std::to_string(shape.chunk) + "_conn" + std::to_string(shape.connections);
}

// Every transport that runs on this machine moves the same matrix of shapes.
class Transfer : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(Transfer, ReadMovesEveryByte) {
  const auto& [transport, shape] = GetParam();
  Connector owner(transport_options(transport, shape.chunk, shape.connections));
  Connector reader(transport_options(transport, shape.chunk, shape.connections));
  auto source = make_buffers(shape.sizes, 11);
  auto target = make_buffers(shape.sizes, std::nullopt);
  auto readable = owner.create_readable(source.view());
  auto read = reader.begin_read(readable.metadata(), target.view());
  EXPECT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(readable.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), transport);
  EXPECT_EQ(readable.transport(), transport);
  expect_pattern(target, 11);
}

TEST_P(Transfer, WriteMovesEveryByte) {
  const auto& [transport, shape] = GetParam();
  Connector owner(transport_options(transport, shape.chunk, shape.connections));
  Connector writer(transport_options(transport, shape.chunk, shape.connections));
  auto source = make_buffers(shape.sizes, 23);
  auto target = make_buffers(shape.sizes, std::nullopt);
  auto writable = owner.create_writable(target.view());
  auto write = writer.begin_write(source.view(), writable.metadata());
  EXPECT_EQ(write.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(write.transport(), transport);
  expect_pattern(target, 23);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, Transfer,
    ::testing::Combine(
        ::testing::Values("tcp", "shm"),
        ::testing::Values(Shape{{1}, 4u << 20, 2}, Shape{{4095}, 4096, 1}, Shape{{4096}, 4096, 2},
                          Shape{{(1u << 20) + 3}, 65536, 4}, Shape{{16u << 20}, 4u << 20, 2},
                          Shape{{256u << 20}, 4u << 20, 2},
                          Shape{{1, 7, 4096, 65537, 1u << 20, 3, 100000, 5}, 8192, 3},
                          // Many small blocks: piece requests (over shm, cross-memory ones
                          // from 128 KiB a request; below, through the socket).
                          Shape{blocks(2048, 8192), 4u << 20, 2},
                          Shape{blocks(1500, 4099), 1u << 20, 3},
                          Shape{blocks(3000, 1, 37, 9), 1u << 20, 2},
                          Shape{blocks(40, 1000, 1, 40), 8192, 1})),
    case_name);

class Concurrency : public ::testing::TestWithParam<std::string> {};

TEST_P(Concurrency, TwoHundredFiftySixOperationsOnOneConnectorPair) {
  Connector owner(transport_options(GetParam(), 16384, 2));
  Connector reader(transport_options(GetParam(), 16384, 2));
  constexpr int kOperations = 256;
  std::vector<Buffers> sources, targets;
  std::vector<ReadableOperation> readables;
  std::vector<ReadOperation> reads;
  for (int i = 0; i < kOperations; ++i) {
    sources.push_back(make_buffers({65536 + static_cast<std::size_t>(i)}, 1000 + i));
    targets.push_back(make_buffers({65536 + static_cast<std::size_t>(i)}, std::nullopt));
  }
  for (int i = 0; i < kOperations; ++i)
    readables.push_back(owner.create_readable(sources[i].view()));
  for (int i = 0; i < kOperations; ++i)
    reads.push_back(reader.begin_read(readables[i].metadata(), targets[i].view()));
  for (int i = 0; i < kOperations; ++i) {
    EXPECT_EQ(reads[i].wait_for_completion(60s), OperationStatus::Complete);
    EXPECT_EQ(readables[i].wait_for_completion(60s), OperationStatus::Complete);
    expect_pattern(targets[i], 1000 + i);
  }
}

// Small answers to requests that arrive together go out together (held back while the reader
// handles the rest of its inbox). Completing a readable waits for its answer's pin: a held
// answer must not keep it, or the reader waits on itself and every operation hangs.
TEST_P(Concurrency, ManySmallReadsEachCompletingItsReadableAllEnd) {
  Connector owner(transport_options(GetParam(), 16384, 1));
  Connector reader(transport_options(GetParam(), 16384, 1));
  constexpr int kOperations = 512;
  std::vector<Buffers> sources, targets;
  std::vector<ReadableOperation> readables;
  std::vector<ReadOperation> reads;
  for (int i = 0; i < kOperations; ++i) {
    sources.push_back(make_buffers({4096}, 3000 + i));
    targets.push_back(make_buffers({4096}, std::nullopt));
    readables.push_back(owner.create_readable(sources[i].view()));
  }
  for (int i = 0; i < kOperations; ++i)
    reads.push_back(reader.begin_read(readables[i].metadata(), targets[i].view()));
  for (int i = 0; i < kOperations; ++i) {
    ASSERT_EQ(reads[i].wait_for_completion(20s), OperationStatus::Complete) << i;
    ASSERT_EQ(readables[i].wait_for_completion(20s), OperationStatus::Complete) << i;
    expect_pattern(targets[i], 3000 + i);
  }
}

TEST_P(Concurrency, ConnectionsArePooledAcrossOperations) {
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

INSTANTIATE_TEST_SUITE_P(Transports, Concurrency, ::testing::Values("tcp", "shm"));

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
