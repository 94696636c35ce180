// Two OS processes over loopback; metadata travels over the peer's stdin/stdout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "memwire/memwire.hpp"
#include "support/child_process.hpp"
#include "support/operation_waits.hpp"
#include "support/pattern.hpp"
#include "support/sanitizers.hpp"
#include "support/shared_mappings.hpp"
#include "support/test_peer_process.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using namespace memwire::test_support;

namespace {

ConnectorOptions tcp_options(std::size_t chunk = 4u << 20) {
  ConnectorOptions options;
  options.transports = {"tcp"};
  options.tcp.chunk_size = chunk;
  return options;
}

// Reads the readable of `metadata` (`size` bytes) into fresh memory over `connector`, checks
// every byte against the pattern of `seed`, and says which transport moved them.
std::string read_checked(Connector& connector, const RdmaMetadata& metadata, std::size_t size,
                         std::uint64_t seed) {
  std::vector<std::byte> target(size);
  auto read = connector.begin_read(metadata, {Descriptor(std::span(target))});
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, seed), size);
  return read.transport();
}

}  // namespace

TEST(MultiProcess, ReadFromAnotherProcess) {
  constexpr std::size_t kSize = 64u << 20;
  PublishingPeer peer("readable", kSize, 5);
  Connector connector(tcp_options());
  read_checked(connector, peer.metadata, kSize, 5);
  EXPECT_EQ(expect_line(peer.child), "complete tcp");
  EXPECT_EQ(peer.child.wait(10s), 0);
}

TEST(MultiProcess, WriteIntoAnotherProcess) {
  constexpr std::size_t kSize = 16u << 20;
  PublishingPeer peer("writable", kSize, 9);
  Connector connector(tcp_options());
  std::vector<std::byte> source(kSize);
  memwire::test_support::fill_pattern(source, 9);
  auto write = connector.begin_write({Descriptor(std::span(source))}, peer.metadata);
  EXPECT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(expect_line(peer.child), "complete tcp");  // the peer verified every byte
  EXPECT_EQ(peer.child.wait(10s), 0);
}

TEST(MultiProcess, AnotherProcessReadsAndWritesUs) {
  Connector connector(tcp_options());
  std::vector<std::byte> readable_memory(1u << 20), writable_memory(1u << 20);
  memwire::test_support::fill_pattern(readable_memory, 3);
  auto readable = connector.create_readable({Descriptor(std::span(readable_memory))});
  auto writable = connector.create_writable({Descriptor(std::span(writable_memory))});
  auto reader = start_test_peer({"active", "read", std::to_string(readable_memory.size()), "3"});
  auto writer = start_test_peer({"active", "write", std::to_string(writable_memory.size()), "4"});
  reader.write_line(readable.metadata().to_json());
  writer.write_line(writable.metadata().to_json());
  EXPECT_EQ(readable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(memwire::test_support::first_mismatch(writable_memory, 4), writable_memory.size());
  EXPECT_EQ(expect_line(reader), "begun");
  EXPECT_EQ(expect_line(reader), "complete tcp");
  EXPECT_EQ(reader.wait(10s), 0);
  EXPECT_EQ(writer.wait(10s), 0);
}

TEST(MultiProcess, PassivePeerKilledMidTransferFailsTheReader) {
  // The stopped peer answers nothing, so any read of more than one request is in flight; 512
  // MiB took 23-47 s under TSan (the peer's pattern and both sides' shadow memory).
  constexpr std::size_t kSize = 16u << 20;
  PublishingPeer peer("readable", kSize, 1);
  Connector connector(tcp_options(4096));
  std::vector<std::byte> target(kSize);
  // Stopped first, so the read is certainly in flight when the peer dies.
  peer.child.kill(SIGSTOP);
  auto read = connector.begin_read(peer.metadata, {Descriptor(std::span(target))});
  peer.child.kill(SIGKILL);
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(failure_code(read, 10s), ErrorCode::PeerLost);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  EXPECT_EQ(read.status(), OperationStatus::Errored);
  EXPECT_NE(read.error_message().find("connection"), std::string::npos) << read.error_message();
}

TEST(MultiProcess, ActivePeerKilledMidTransferFailsTheOwner) {
  // Under a sanitizer each request is slower, and a quarter of the size still outlasts the kill
  // (512 MiB took 8-46 s under TSan, mostly the two sides' memory).
  constexpr std::size_t kSize = (MEMWIRE_TEST_UNDER_SANITIZER ? 128u : 512u) << 20;
  Connector connector(tcp_options());
  std::vector<std::byte> memory(kSize);
  auto readable = connector.create_readable({Descriptor(std::span(memory))});
  // 4 KiB requests: a 512 MiB read takes long enough to be killed in the middle.
  auto child = start_test_peer({"active", "read", std::to_string(kSize), "0", "4096"});
  child.write_line(readable.metadata().to_json());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (readable.status() == OperationStatus::Initialized &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();  // until the first request arrived
  ASSERT_EQ(readable.status(), OperationStatus::InProgress);
  child.kill(SIGKILL);
  EXPECT_EQ(failure_code(readable, 10s), ErrorCode::PeerLost);
  EXPECT_NE(readable.error_message().find("active side is gone"), std::string::npos)
      << readable.error_message();
}

TEST(MultiProcess, DroppedReadStopsWritingIntoLocalMemory) {
  constexpr std::size_t kSize = 8u << 20;
  PublishingPeer peer("readable", kSize, 2);
  Connector connector(tcp_options(65536));
  std::vector<std::byte> target(kSize, std::byte{0x11});
  peer.child.kill(SIGSTOP);  // requests queue up at the stopped owner
  {
    auto read = connector.begin_read(peer.metadata, {Descriptor(std::span(target))});
  }  // dropped unfinished: cancelled, local memory no longer written
  peer.child.kill(SIGCONT);
  // The owner learns the reader gave up, and its late answers were drained, not written.
  EXPECT_EQ(expect_line(peer.child),
            "error cancelled: the active side reported: dropped by the active side");
  EXPECT_EQ(peer.child.wait(10s), 1);
  EXPECT_EQ(target, std::vector<std::byte>(kSize, std::byte{0x11}));
}

TEST(MultiProcess, SameHostProcessesUseShm) {
  constexpr std::size_t kSize = 64u << 20;
  PublishingPeer peer("readable", kSize, 8);
  ConnectorOptions options;
  options.transports = {"shm", "tcp"};
  Connector connector(options);
  EXPECT_EQ(read_checked(connector, peer.metadata, kSize, 8), "shm");
  EXPECT_EQ(expect_line(peer.child), "complete shm");
}

TEST(MultiProcess, AnotherProcessesSharedBufferIsReadThroughAMapping) {
  constexpr std::size_t kSize = 64u << 20;
  PublishingPeer peer("readable", kSize, 12, {"MEMWIRE_PEER_SHARED=1"});
  std::vector<std::byte> target(kSize);
  {
    Connector connector;
    auto read = connector.begin_read(peer.metadata, {Descriptor(std::span(target))});
    EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    EXPECT_EQ(read.transport(), "shm");
    EXPECT_GT(memwire::test_support::shared_mappings(), 0)
        << "the owner's SharedBuffer was not mapped here";
  }
  EXPECT_EQ(memwire::test_support::shared_mappings(), 0) << "mappings outlived the connector";
  EXPECT_EQ(memwire::test_support::first_mismatch(target, 12), kSize);
  EXPECT_EQ(expect_line(peer.child), "complete shm");
}

TEST(MultiProcess, WriteIntoAnotherProcessesSharedBufferCompletesItVerified) {
  constexpr std::size_t kSize = (16u << 20) + 9;
  PublishingPeer peer("writable", kSize, 13, {"MEMWIRE_PEER_SHARED=1"});
  std::vector<std::byte> source(kSize);
  memwire::test_support::fill_pattern(source, 13);
  Connector connector;
  auto write = connector.begin_write({Descriptor(std::span(source))}, peer.metadata);
  EXPECT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_GT(memwire::test_support::shared_mappings(), 0);
  EXPECT_EQ(expect_line(peer.child), "complete shm");  // the peer checked every byte
}

TEST(MultiProcess, RefusedCrossMemoryAccessFallsBackToTcpAndSaysWhy) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to start a peer as another user";
  constexpr std::size_t kSize = 4u << 20;
  // The owner runs as nobody: the kernel will not let it copy into our (root's) memory.
  PublishingPeer peer("readable", kSize, 6, {"MEMWIRE_PEER_AS_NOBODY=1"});
  std::vector<std::string> logged;
  ConnectorOptions options;
  options.transports = {"shm", "tcp"};
  options.log = [&](std::string_view line) { logged.emplace_back(line); };
  Connector connector(options);
  EXPECT_EQ(read_checked(connector, peer.metadata, kSize, 6), "tcp");
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("shm unusable"), std::string::npos) << logged[0];
  EXPECT_NE(logged[0].find("refused"), std::string::npos) << logged[0];
  EXPECT_EQ(expect_line(peer.child), "complete tcp");
}
