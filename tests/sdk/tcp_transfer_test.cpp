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

ConnectorOptions tcp_options(std::size_t chunk, unsigned connections) {
  ConnectorOptions options;
  options.transports = {"tcp"};
  options.tcp_chunk_size = chunk;
  options.tcp_connections_per_peer = connections;
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

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  std::string name;
  for (auto size : info.param.sizes) name += std::to_string(size) + "_";
  return name + "chunk" + std::to_string(info.param.chunk) + "_conn" +
         std::to_string(info.param.connections);
}

class TcpTransfer : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(TcpTransfer, ReadMovesEveryByte) {
  const auto& shape = GetParam();
  Connector owner(tcp_options(shape.chunk, shape.connections));
  Connector reader(tcp_options(shape.chunk, shape.connections));
  auto source = make_buffers(shape.sizes, 11);
  auto target = make_buffers(shape.sizes, std::nullopt);
  auto readable = owner.create_readable(source.view());
  auto read = reader.begin_read(readable.metadata(), target.view());
  EXPECT_EQ(read.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(readable.wait_for_completion(60s), OperationStatus::Complete);
  expect_pattern(target, 11);
}

TEST_P(TcpTransfer, WriteMovesEveryByte) {
  const auto& shape = GetParam();
  Connector owner(tcp_options(shape.chunk, shape.connections));
  Connector writer(tcp_options(shape.chunk, shape.connections));
  auto source = make_buffers(shape.sizes, 23);
  auto target = make_buffers(shape.sizes, std::nullopt);
  auto writable = owner.create_writable(target.view());
  auto write = writer.begin_write(source.view(), writable.metadata());
  EXPECT_EQ(write.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(60s), OperationStatus::Complete);
  expect_pattern(target, 23);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, TcpTransfer,
    ::testing::Values(Shape{{1}, 4u << 20, 2}, Shape{{4095}, 4096, 1}, Shape{{4096}, 4096, 2},
                      Shape{{(1u << 20) + 3}, 65536, 4}, Shape{{16u << 20}, 4u << 20, 2},
                      Shape{{256u << 20}, 4u << 20, 2},
                      Shape{{1, 7, 4096, 65537, 1u << 20, 3, 100000, 5}, 8192, 3}),
    shape_name);

TEST(TcpConcurrency, TwoHundredFiftySixOperationsOnOneConnectorPair) {
  Connector owner(tcp_options(16384, 2));
  Connector reader(tcp_options(16384, 2));
  constexpr int kOperations = 256;
  std::vector<Buffers> sources, targets;
  std::vector<ReadableOperation> readables;
  std::vector<ReadOperation> reads;
  for (int i = 0; i < kOperations; ++i) {
    sources.push_back(make_buffers({65536 + static_cast<std::size_t>(i)}, 1000 + i));
    targets.push_back(make_buffers({65536 + static_cast<std::size_t>(i)}, std::nullopt));
  }
  for (int i = 0; i < kOperations; ++i) readables.push_back(owner.create_readable(sources[i].view()));
  for (int i = 0; i < kOperations; ++i)
    reads.push_back(reader.begin_read(readables[i].metadata(), targets[i].view()));
  for (int i = 0; i < kOperations; ++i) {
    EXPECT_EQ(reads[i].wait_for_completion(60s), OperationStatus::Complete);
    EXPECT_EQ(readables[i].wait_for_completion(60s), OperationStatus::Complete);
    expect_pattern(targets[i], 1000 + i);
  }
}

TEST(TcpConcurrency, ConnectionsArePooledAcrossOperations) {
  Connector owner(tcp_options(4096, 2));
  Connector reader(tcp_options(4096, 2));
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
