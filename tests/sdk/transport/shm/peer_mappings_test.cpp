// PeerMappings (sdk/src/transport/shm/peer_mappings.*): a same-host peer's SharedBuffers,
// mapped through /proc/<pid>/fd. The "peer" here is this very process, which the kernel lets
// us open like any other of our own user; the buffers are real SharedBuffers.
#include "transport/shm/peer_mappings.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/shared_buffer.hpp"
#include "support/pattern.hpp"
#include "support/shared_mappings.hpp"
#include "transport/shm/shared_memory_index.hpp"

using namespace memwire;
using namespace memwire::detail;

namespace {

SharedLocation location_of(const SharedBuffer& buffer) {
  auto bytes = buffer.bytes();
  auto location = find_shared(bytes.data(), bytes.size());
  if (!location) throw std::runtime_error("a SharedBuffer is not in the index");
  return *location;
}

// The Error{Transport} that mapping `location` throws; its text, or "" when none is thrown.
std::string refusal(PeerMappings& mappings, const SharedLocation& location, bool writable) {
  try {
    (void)mappings.map(location, writable);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Transport) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "mapped what it should have refused";
  return "";
}

TEST(PeerMappings, MapsThePeersBufferAndSeesItsBytes) {
  SharedBuffer buffer(1 << 20);
  test_support::fill_pattern(buffer.bytes(), 7);
  const auto location = location_of(buffer);
  PeerMappings mappings(::getpid());
  auto readable = mappings.map(location, false);
  ASSERT_EQ(readable->size(), location.file_size);
  EXPECT_EQ(test_support::first_mismatch(
                std::span<const std::byte>(readable->base() + location.offset, 1 << 20), 7),
            std::size_t{1 << 20});
  // Writable: what is written through the mapping is in the peer's buffer.
  auto writable = mappings.map(location, true);
  std::memset(writable->base() + location.offset, 0x5a, 4096);
  EXPECT_EQ(buffer.bytes()[0], std::byte{0x5a});
  EXPECT_EQ(buffer.bytes()[4095], std::byte{0x5a});
  EXPECT_NE(buffer.bytes()[4096], std::byte{0x5a});
}

TEST(PeerMappings, KeepsEachMappingForLaterTransfers) {
  SharedBuffer buffer(65536);
  const auto location = location_of(buffer);
  PeerMappings mappings(::getpid());
  auto first = mappings.map(location, false);
  EXPECT_EQ(mappings.map(location, false), first) << "mapped again instead of reused";
  auto writable = mappings.map(location, true);
  EXPECT_NE(writable, first) << "a read-only mapping was handed out for writing";
  EXPECT_EQ(mappings.map(location, true), writable);
}

TEST(PeerMappings, RefusesAnotherFileUnderTheSameDescriptor) {
  SharedBuffer buffer(65536);
  auto location = location_of(buffer);
  PeerMappings mappings(::getpid());
  location.inode += 1;  // the descriptor now names a different file than the peer said
  EXPECT_NE(refusal(mappings, location, false).find("(check /proc/"), std::string::npos);
  location = location_of(buffer);
  location.file_size += 1;  // more than the file holds
  EXPECT_NE(refusal(mappings, location, false).find("(check /proc/"), std::string::npos);
}

TEST(PeerMappings, RefusesAClosedDescriptorOrOneThatIsNoFile) {
  PeerMappings mappings(::getpid());
  SharedLocation nowhere{999999, 1, 0, 4096};
  EXPECT_NE(refusal(mappings, nowhere, false).find("(open /proc/"), std::string::npos);
  // A pipe: opening it must not block (O_NONBLOCK), and it is no regular file.
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  SharedLocation pipe{static_cast<std::uint64_t>(ends[0]), 1, 0, 4096};
  EXPECT_NE(refusal(mappings, pipe, false).find("(check /proc/"), std::string::npos);
  ::close(ends[0]);
  ::close(ends[1]);
}

// A buffer the peer let go of is unmapped on the next miss, not kept for ever.
TEST(PeerMappings, ForgetsBuffersThePeerReleased) {
  PeerMappings mappings(::getpid());
  const int before = test_support::shared_mappings();
  {
    SharedBuffer gone(65536);
    (void)mappings.map(location_of(gone), false);
    EXPECT_EQ(test_support::shared_mappings(), before + 2);  // its own and ours
  }
  EXPECT_EQ(test_support::shared_mappings(), before + 1);  // ours, cached
  SharedBuffer next(65536);
  (void)mappings.map(location_of(next), false);
  EXPECT_EQ(test_support::shared_mappings(), before + 2) << "the released buffer stayed mapped";
}

// However many buffers the peer has, at most kMaxMappings stay mapped; an evicted one maps again.
TEST(PeerMappings, KeepsAtMostTheLimit) {
  PeerMappings mappings(::getpid());
  const int before = test_support::shared_mappings();
  std::vector<SharedBuffer> buffers;
  const int count = static_cast<int>(PeerMappings::kMaxMappings) + 8;
  for (int i = 0; i < count; ++i) buffers.emplace_back(4096);
  for (auto& buffer : buffers) (void)mappings.map(location_of(buffer), false);
  EXPECT_LE(test_support::shared_mappings(),
            before + count + static_cast<int>(PeerMappings::kMaxMappings));
  test_support::fill_pattern(buffers.front().bytes(), 3);
  const auto first = location_of(buffers.front());
  auto again = mappings.map(first, false);
  EXPECT_EQ(test_support::first_mismatch(
                std::span<const std::byte>(again->base() + first.offset, 4096), 3),
            std::size_t{4096});
}

}  // namespace
