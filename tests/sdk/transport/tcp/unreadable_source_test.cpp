// Issue 23, finding 9: memory that becomes unreadable under a transfer (a served file truncated
// while it is read). The owner's send fails with EFAULT before a byte of its answer left: the
// reader is answered with that reason (not a bare "peer closed the connection") and the
// owner's operation fails saying its memory went (not "the active side is gone").
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "memwire/memwire.hpp"
#include "support/operation_waits.hpp"
#include "util/file_descriptor.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::test_support::failure_code;

namespace {

// `chunk`: one request for the whole file (its answer completes the readable), or many.
void read_a_truncated_file(std::size_t chunk) {
  ConnectorOptions options;
  options.transports = {"tcp"};
  options.tcp.chunk_size = chunk;
  Connector owner(options), reader(options);
  constexpr std::size_t kSize = 8u << 20;
  detail::FileDescriptor file(::memfd_create("memwire-served-file", MFD_CLOEXEC));
  ASSERT_TRUE(file);
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  void* mapping = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, file.get(), 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto readable = owner.create_readable({Descriptor(mapping, kSize)});
  // All but the first page goes: the owner's sends of the rest meet EFAULT.
  ASSERT_EQ(::ftruncate(file.get(), 4096), 0);
  std::vector<std::byte> target(kSize);
  {
    auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    EXPECT_EQ(failure_code(read, 30s), ErrorCode::Transport);
    EXPECT_NE(read.error_message().find("no longer readable"), std::string::npos)
        << read.error_message();
  }
  EXPECT_EQ(failure_code(readable, 30s), ErrorCode::Transport) << readable.error_message();
  EXPECT_NE(readable.error_message().find("no longer readable"), std::string::npos)
      << readable.error_message();
  ::munmap(mapping, kSize);
}

TEST(UnreadableSource, AFileTruncatedUnderAOneRequestReadFailsBothSidesWithTheReason) {
  read_a_truncated_file(16u << 20);
}

TEST(UnreadableSource, AFileTruncatedUnderAChunkedReadFailsBothSidesWithTheReason) {
  read_a_truncated_file(1u << 20);
}

}  // namespace
