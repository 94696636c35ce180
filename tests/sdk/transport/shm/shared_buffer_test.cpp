#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"
#include "support/pattern.hpp"
#include "support/shared_mappings.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using namespace memwire::test_support;

namespace {

ConnectorOptions shm_options(std::size_t chunk = 4 << 20) {
  ConnectorOptions options;
  options.transports = {"shm"};
  options.tcp.chunk_size = chunk;
  return options;
}

struct SharedBufferTransfer : ::testing::Test {
  Connector owner{shm_options()};
  Connector peer{shm_options()};
};

}  // namespace

TEST(SharedBuffer, IsZeroFilledMovableAndRefusesSizeZero) {
  SharedBuffer buffer(10'000);
  EXPECT_EQ(buffer.size(), 10'000u);
  for (auto byte : buffer.bytes()) ASSERT_EQ(byte, std::byte{0});
  auto* data = buffer.data();
  SharedBuffer moved(std::move(buffer));
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(moved.descriptor().ptr(), data);
  EXPECT_EQ(moved.descriptor().size(), 10'000u);
  EXPECT_EQ(error_code_of([] { SharedBuffer empty(0); }), ErrorCode::InvalidArgument);
}

TEST(SharedBufferTransfers, ReadIsCopiedThroughTheReadersOwnMapping) {
  // From 128 KiB on, same-host chunks move through memory rather than the socket.
  for (std::size_t size :
       {std::size_t{128 << 10}, std::size_t{(1 << 20) + 7}, std::size_t{(16 << 20) + 3}}) {
    Connector owner{shm_options()}, peer{shm_options()};  // no mappings left from other sizes
    SharedBuffer source(size);
    fill_pattern(source.bytes(), size);
    std::vector<std::byte> target(size);
    const int before = shared_mappings();
    auto readable = owner.create_readable({source.descriptor()});
    auto read = peer.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
    ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
    EXPECT_EQ(read.transport(), "shm");
    EXPECT_EQ(first_mismatch(target, size), size) << size << " bytes";
    EXPECT_GT(shared_mappings(), before) << "the reader never mapped the owner's buffer";
  }
}

TEST_F(SharedBufferTransfer, WriteLandsInTheOwnersBufferBeforeItCompletes) {
  SharedBuffer target((4 << 20) + 5);
  std::vector<std::byte> source(target.size());
  fill_pattern(source, 7);
  auto writable = owner.create_writable({target.descriptor()});
  auto write = peer.begin_write({Descriptor(std::span(source))}, writable.metadata());
  ASSERT_EQ(writable.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target.bytes(), 7), target.size());
  EXPECT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
}

TEST_F(SharedBufferTransfer, SharedAndPlainDescriptorsMixInOneOperation) {
  // Chunks of 128 KiB over two connections: some answered with a mapping, some copied by the
  // kernel, the short last ones sent on the socket, all in one operation.
  Connector small_chunks_owner{shm_options(128 << 10)}, small_chunks_peer{shm_options(128 << 10)};
  SharedBuffer shared(1'000'001);
  std::vector<std::byte> plain(700'003);
  fill_pattern(shared.bytes(), 1);
  fill_pattern(plain, 2);
  std::vector<std::byte> first(shared.size()), second(plain.size());
  auto readable =
      small_chunks_owner.create_readable({shared.descriptor(), Descriptor(std::span(plain))});
  auto read = small_chunks_peer.begin_read(
      readable.metadata(), {Descriptor(std::span(first)), Descriptor(std::span(second))});
  ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
  ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(first, 1), first.size());
  EXPECT_EQ(first_mismatch(second, 2), second.size());
}

TEST(SharedBufferTransfers, AFreedBufferIsNeverReadThroughAnOldMapping) {
  auto one_connection = shm_options();
  one_connection.tcp.connections_per_peer = 1;  // one mapping cache to look at
  Connector owner{one_connection}, peer{one_connection};
  std::vector<std::byte> target(1 << 20);
  for (std::uint64_t round = 0; round < 3; ++round) {
    // Same size each round, often the same address: only the file's identity tells them apart.
    SharedBuffer source(target.size());
    fill_pattern(source.bytes(), 100 + round);
    auto readable = owner.create_readable({source.descriptor()});
    auto read = peer.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
    ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
    EXPECT_EQ(first_mismatch(target, 100 + round), target.size()) << "round " << round;
    // The owner's buffer and the peer's mapping of it: the earlier rounds' were let go.
    EXPECT_EQ(shared_mappings(), 2) << "round " << round;
  }
}

TEST_F(SharedBufferTransfer, ATokenThatDoesNotMatchGetsNoMapping) {
  SharedBuffer source(1 << 20);
  auto readable = owner.create_readable({source.descriptor()});
  auto forged = RdmaMetadata::from_json([&] {
    auto json = readable.metadata().to_json();
    auto at = json.find("\"token\":\"") + 9;
    json[at] = json[at] == 'a' ? 'b' : 'a';
    return json;
  }());
  std::vector<std::byte> target(source.size());
  const int before = shared_mappings();
  auto read = peer.begin_read(forged, {Descriptor(std::span(target))});
  EXPECT_EQ(error_code_of([&] { read.wait_for_completion(10s); }), ErrorCode::AccessDenied);
  EXPECT_EQ(shared_mappings(), before);
}

// The owner's memfd travels once per buffer and access on a connection, not per transfer: the
// descriptors a peer receives do not pile up, and those of a buffer the owner closed go when
// the next one arrives.
TEST(SharedBufferTransfers, ReceivedDescriptorsDoNotPileUp) {
  auto one_connection = shm_options();
  one_connection.tcp.connections_per_peer = 1;
  Connector owner{one_connection}, peer{one_connection};
  const auto memfds = [] {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code failed;
      count +=
          std::filesystem::read_symlink(entry.path(), failed).string().find("memwire-shared") !=
          std::string::npos;
    }
    return count;
  };
  std::vector<std::byte> local(1 << 20);
  auto round_trip = [&](const SharedBuffer& buffer, int rounds) {
    for (int i = 0; i < rounds; ++i) {
      auto readable = owner.create_readable({buffer.descriptor()});
      auto read = peer.begin_read(readable.metadata(), {Descriptor(std::span(local))});
      ASSERT_EQ(read.wait_for_completion(10s), OperationStatus::Complete);
      ASSERT_EQ(readable.wait_for_completion(10s), OperationStatus::Complete);
      auto writable = owner.create_writable({buffer.descriptor()});
      auto write = peer.begin_write({Descriptor(std::span(local))}, writable.metadata());
      ASSERT_EQ(write.wait_for_completion(10s), OperationStatus::Complete);
      ASSERT_EQ(writable.wait_for_completion(10s), OperationStatus::Complete);
    }
  };
  {
    SharedBuffer first(local.size());
    const int before = memfds();
    round_trip(first, 1);
    // The peer's read-only descriptor of it, once. Read first for an operation peers may not
    // write, the buffer is sealed read-only for good: the writes are copied by the owner.
    EXPECT_EQ(memfds(), before + 1);
    round_trip(first, 100);
    EXPECT_EQ(memfds(), before + 1) << "descriptors piled up over 100 transfers";
  }
  SharedBuffer second(local.size());
  const int with_second = memfds();  // its own, and the peer's one of the closed one
  round_trip(second, 1);
  EXPECT_EQ(memfds(), with_second) << "the closed buffer's descriptors were kept";
  // More buffers in turn than a connection holds at once (64): each one closed makes room, and
  // the count stays where the first left it (second's two, the current one's two).
  int steady = 0;
  for (int i = 0; i < 70; ++i) {
    SharedBuffer next(local.size());
    round_trip(next, 1);
    if (i == 0) steady = memfds();
    ASSERT_EQ(memfds(), steady) << "buffer " << i;
  }
  EXPECT_EQ(steady, 4);
}
