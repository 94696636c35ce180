// Every transport moves every byte of the same matrix of shapes, both ways, and many
// operations at once on one connector pair.
#include "sdk/transport/conformance/transport_conformance.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

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

class TransferConformance : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (auto reason = transport_unavailable(std::get<0>(GetParam()))) GTEST_SKIP() << *reason;
  }
};

TEST_P(TransferConformance, ReadMovesEveryByte) {
  const auto& [transport, shape] = GetParam();
  Connector owner(conformance_options(transport, shape.chunk, shape.connections));
  Connector reader(conformance_options(transport, shape.chunk, shape.connections));
  ConformanceBuffers source(shape.sizes), target(shape.sizes);
  source.fill(11);
  auto readable = owner.create_readable(source.descriptors());
  auto read = reader.begin_read(readable.metadata(), target.descriptors());
  EXPECT_EQ(read.wait_for_completion(120s), OperationStatus::Complete);
  EXPECT_EQ(readable.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), transport);
  EXPECT_EQ(readable.transport(), transport);
  EXPECT_EQ(target.first_bad(11), shape.sizes.size()) << "a descriptor differs";
}

TEST_P(TransferConformance, WriteMovesEveryByte) {
  const auto& [transport, shape] = GetParam();
  Connector owner(conformance_options(transport, shape.chunk, shape.connections));
  Connector writer(conformance_options(transport, shape.chunk, shape.connections));
  ConformanceBuffers source(shape.sizes), target(shape.sizes);
  source.fill(23);
  auto writable = owner.create_writable(target.descriptors());
  auto write = writer.begin_write(source.descriptors(), writable.metadata());
  EXPECT_EQ(write.wait_for_completion(120s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(60s), OperationStatus::Complete);
  EXPECT_EQ(write.transport(), transport);
  EXPECT_EQ(writable.transport(), transport);
  EXPECT_EQ(target.first_bad(23), shape.sizes.size()) << "a descriptor differs";
}

// The 256 MiB shape runs on every transport; the guests leave it out for verbs
// (integration/rxe/run-tests: Soft-RoCE under TCG moves about 20 MiB/s).
INSTANTIATE_TEST_SUITE_P(
    Sizes, TransferConformance,
    ::testing::Combine(
        ::testing::ValuesIn(conformance_transports()),
        ::testing::Values(Shape{{1}, 4u << 20, 2}, Shape{{4095}, 4096, 1}, Shape{{4096}, 4096, 2},
                          Shape{{(1u << 20) + 3}, 65536, 4}, Shape{{16u << 20}, 4u << 20, 2},
                          Shape{{64u << 20}, 4u << 20, 2}, Shape{{256u << 20}, 4u << 20, 2},
                          Shape{{1, 7, 4096, 65537, 1u << 20, 3, 100000, 5}, 8192, 3},
                          // Many small blocks: piece requests (over shm, cross-memory ones
                          // from 128 KiB a request; below, through the socket).
                          Shape{blocks(2048, 8192), 4u << 20, 2},
                          Shape{blocks(1500, 4099), 1u << 20, 3},
                          Shape{blocks(3000, 1, 37, 9), 1u << 20, 2},
                          Shape{blocks(40, 1000, 1, 40), 8192, 1})),
    case_name);

class ConcurrencyConformance : public TransportConformance {};

TEST_P(ConcurrencyConformance, TwoHundredFiftySixOperationsOnOneConnectorPair) {
  Connector owner(options(16384, 2)), reader(options(16384, 2));
  constexpr int kOperations = 256;
  std::vector<ConformanceBuffers> sources, targets;
  std::vector<ReadableOperation> readables;
  std::vector<ReadOperation> reads;
  for (int i = 0; i < kOperations; ++i) {
    sources.emplace_back(std::vector<std::size_t>{65536 + static_cast<std::size_t>(i)});
    sources.back().fill(1000 + i);
    targets.emplace_back(std::vector<std::size_t>{65536 + static_cast<std::size_t>(i)});
  }
  for (int i = 0; i < kOperations; ++i)
    readables.push_back(owner.create_readable(sources[i].descriptors()));
  for (int i = 0; i < kOperations; ++i)
    reads.push_back(reader.begin_read(readables[i].metadata(), targets[i].descriptors()));
  for (int i = 0; i < kOperations; ++i) {
    EXPECT_EQ(reads[i].wait_for_completion(60s), OperationStatus::Complete) << i;
    EXPECT_EQ(readables[i].wait_for_completion(60s), OperationStatus::Complete) << i;
    EXPECT_EQ(targets[i].first_bad(1000 + i), 1u) << i;
  }
}

// Small answers to requests that arrive together go out together (the stream transports hold
// them back while the reader handles the rest of its inbox). Completing a readable waits for
// its answer's pin: a held answer must not keep it, or every operation hangs.
TEST_P(ConcurrencyConformance, ManySmallReadsEachCompletingItsReadableAllEnd) {
  Connector owner(options(16384, 1)), reader(options(16384, 1));
  constexpr int kOperations = 512;
  std::vector<ConformanceBuffers> sources, targets;
  std::vector<ReadableOperation> readables;
  std::vector<ReadOperation> reads;
  for (int i = 0; i < kOperations; ++i) {
    sources.emplace_back(std::vector<std::size_t>{4096});
    sources.back().fill(3000 + i);
    targets.emplace_back(std::vector<std::size_t>{4096});
    readables.push_back(owner.create_readable(sources[i].descriptors()));
  }
  for (int i = 0; i < kOperations; ++i)
    reads.push_back(reader.begin_read(readables[i].metadata(), targets[i].descriptors()));
  for (int i = 0; i < kOperations; ++i) {
    ASSERT_EQ(reads[i].wait_for_completion(60s), OperationStatus::Complete) << i;
    ASSERT_EQ(readables[i].wait_for_completion(60s), OperationStatus::Complete) << i;
    EXPECT_EQ(targets[i].first_bad(3000 + i), 1u) << i;
  }
}

// The nixl_connect pattern: a fresh readable per operation, its owner waiting on it while the
// reader reads, one after another over the same connector pair.
TEST_P(ConcurrencyConformance, AFreshReadablePerOperationWithTheOwnerWaiting) {
  Connector owner(options()), reader(options());
  for (int round = 0; round < 100; ++round) {
    ConformanceBuffers source({4096}), target({4096});
    source.fill(round);
    auto readable = owner.create_readable(source.descriptors());
    auto metadata = readable.metadata();
    auto owner_side =
        std::async(std::launch::async, [&] { return readable.wait_for_completion(30s); });
    auto read = reader.begin_read(metadata, target.descriptors());
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete) << round;
    ASSERT_EQ(owner_side.get(), OperationStatus::Complete) << round;
    ASSERT_EQ(target.first_bad(round), 1u) << round;
  }
}

MEMWIRE_CONFORMANCE_SUITE(ConcurrencyConformance);

}  // namespace
