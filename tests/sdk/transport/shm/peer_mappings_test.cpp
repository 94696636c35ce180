// PeerMappings (sdk/src/transport/shm/peer_mappings.*): the SharedBuffers a same-host owner handed
// this connection as descriptors. Each is checked before it is kept (a memfd sealed against
// shrinking, growing and new seals, of the size the answer says, opened for the access asked),
// and only a buffer handed over can be mapped: nothing is opened by a number or a path.
#include "transport/shm/peer_mappings.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
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

// Hands `buffer` over as its owner would (read-only unless `writable`), for memory peers may
// write (a pool with remote_write): the same buffer can then be handed both ways.
void give(PeerMappings& mappings, const SharedBuffer& buffer, bool writable) {
  const auto location = location_of(buffer);
  auto descriptor = share_shared_buffer(location.buffer, writable, /*peers_may_write=*/true);
  ASSERT_TRUE(descriptor);
  mappings.adopt(location.buffer, location.file_size, writable, std::move(descriptor));
}

// The Error{Protocol} text adopting `descriptor` as a buffer of `size` bytes throws, or "".
std::string refusal(FileDescriptor descriptor, std::uint64_t size, bool writable = false) {
  PeerMappings mappings;
  try {
    mappings.adopt(1, size, writable, std::move(descriptor));
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Protocol) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "kept a descriptor it should have refused";
  return "";
}

FileDescriptor memfd(unsigned flags, off_t size, int seals) {
  FileDescriptor file(::memfd_create("memwire-test", MFD_CLOEXEC | flags));
  EXPECT_TRUE(file);
  EXPECT_EQ(::ftruncate(file.get(), size), 0);
  if (seals != 0) {
    EXPECT_EQ(::fcntl(file.get(), F_ADD_SEALS, seals), 0);
  }
  return file;
}

constexpr int kAllSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

TEST(PeerMappings, MapsAGivenBufferAndSeesItsBytes) {
  SharedBuffer buffer(1 << 20);
  test_support::fill_pattern(buffer.bytes(), 7);
  const auto location = location_of(buffer);
  PeerMappings mappings;
  give(mappings, buffer, false);
  give(mappings, buffer, true);
  auto readable = mappings.map(location, false);
  ASSERT_EQ(readable->size(), location.file_size);
  EXPECT_EQ(test_support::first_mismatch(
                std::span<const std::byte>(readable->base() + location.offset, 1 << 20), 7),
            std::size_t{1 << 20});
  // Writable: what is written through the mapping is in the owner's buffer.
  auto writable = mappings.map(location, true);
  std::memset(writable->base() + location.offset, 0x5a, 4096);
  EXPECT_EQ(buffer.bytes()[0], std::byte{0x5a});
  EXPECT_EQ(buffer.bytes()[4095], std::byte{0x5a});
  EXPECT_NE(buffer.bytes()[4096], std::byte{0x5a});
}

TEST(PeerMappings, KeepsEachMappingForLaterTransfers) {
  SharedBuffer buffer(65536);
  const auto location = location_of(buffer);
  PeerMappings mappings;
  give(mappings, buffer, false);
  give(mappings, buffer, true);
  auto first = mappings.map(location, false);
  EXPECT_EQ(mappings.map(location, false), first) << "mapped again instead of reused";
  auto writable = mappings.map(location, true);
  EXPECT_NE(writable, first) << "a read-only mapping was handed out for writing";
  EXPECT_EQ(mappings.map(location, true), writable);
}

// A buffer number only finds what was handed over: for that access, and nothing else.
TEST(PeerMappings, MapsNothingItWasNotGiven) {
  SharedBuffer buffer(65536);
  const auto location = location_of(buffer);
  PeerMappings mappings;
  EXPECT_THROW((void)mappings.map(location, false), Error);
  give(mappings, buffer, false);
  try {
    (void)mappings.map(location, true);
    ADD_FAILURE() << "mapped writable a buffer given read-only";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Protocol);
    EXPECT_NE(std::string(error.what()).find("never sent"), std::string::npos) << error.what();
  }
  // A span past the end, or not on a page, or of another size than the buffer's.
  auto span = SharedSpan{location.buffer, location.file_size, 4096, location.file_size};
  EXPECT_THROW((void)mappings.map(span, false), Error);
  span = SharedSpan{location.buffer, location.file_size, 100, 4096};
  EXPECT_THROW((void)mappings.map(span, false), Error);
  span = SharedSpan{location.buffer, location.file_size * 2, 0, location.file_size * 2};
  EXPECT_THROW((void)mappings.map(span, false), Error);
}

// The owner's read-only descriptor cannot be mapped writable, here or by anyone it reaches,
// reopened read-write or not (tests/sdk/transport/shm/read_only_sharing_test.cpp tries all ways
// from another process).
TEST(PeerMappings, AReadOnlyDescriptorIsNoWritableOne) {
  SharedBuffer buffer(65536);
  const auto location = location_of(buffer);
  auto descriptor = share_shared_buffer(location.buffer, false, false);
  ASSERT_TRUE(descriptor);
  EXPECT_EQ(::fcntl(descriptor.get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(::mmap(nullptr, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor.get(), 0),
            MAP_FAILED);
  const auto path = "/proc/self/fd/" + std::to_string(descriptor.get());
  FileDescriptor reopened(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (reopened) {  // root, or the owner's user
    EXPECT_EQ(::mmap(nullptr, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, reopened.get(), 0),
              MAP_FAILED);
  }
  buffer.bytes()[0] = std::byte{1};  // the owner's own mapping still writes
  EXPECT_NE(refusal(std::move(descriptor), location.file_size, true).find("read-only"),
            std::string::npos);
}

// The first hand-out of a buffer seals it for good: handed read-only for memory peers may not
// write, it is never handed writable (the owner copies instead); handed for memory peers may
// write, it is never handed for memory they may not (a read-only descriptor of it could be
// reopened writable).
TEST(PeerMappings, TheFirstHandOutDecidesWhetherPeersMayWriteTheBuffer) {
  SharedBuffer read_only(65536), writable(65536);
  const auto sealed = location_of(read_only).buffer;
  ASSERT_TRUE(share_shared_buffer(sealed, false, false));
  auto read = share_shared_buffer(sealed, false, false);
  ASSERT_TRUE(read);
  EXPECT_EQ(::fcntl(read.get(), F_GET_SEALS) & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL),
            F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
  EXPECT_FALSE(share_shared_buffer(sealed, true, true));
  EXPECT_TRUE(share_shared_buffer(sealed, false, true));  // read-only stays read-only

  const auto open = location_of(writable).buffer;
  auto written = share_shared_buffer(open, true, true);
  ASSERT_TRUE(written);
  EXPECT_EQ(::fcntl(written.get(), F_GET_SEALS) & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL), F_SEAL_SEAL);
  EXPECT_FALSE(share_shared_buffer(open, false, false));
  EXPECT_TRUE(share_shared_buffer(open, false, true));
}

TEST(PeerMappings, RefusesWhatIsNotASealedMemfdOfTheSizeSaid) {
  // A plain file (the kind a hostile owner would hand over to reach the peer's files).
  char path[] = "/tmp/memwire-peer-mappings-XXXXXX";
  FileDescriptor plain(::mkostemp(path, O_CLOEXEC));
  ASSERT_TRUE(plain);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(plain.get(), 65536), 0);
  EXPECT_NE(refusal(std::move(plain), 65536).find("not a memfd"), std::string::npos);
  // A memfd that cannot be sealed, one sealed against nothing, one that may still grow or
  // shrink, one that may take new seals.
  EXPECT_NE(refusal(memfd(0, 65536, 0), 65536).find("not sealed"), std::string::npos);
  EXPECT_NE(refusal(memfd(MFD_ALLOW_SEALING, 65536, 0), 65536).find("not sealed"),
            std::string::npos);
  EXPECT_NE(refusal(memfd(MFD_ALLOW_SEALING, 65536, F_SEAL_SHRINK | F_SEAL_SEAL), 65536)
                .find("not sealed"),
            std::string::npos);
  EXPECT_NE(
      refusal(memfd(MFD_ALLOW_SEALING, 65536, F_SEAL_GROW | F_SEAL_SEAL), 65536).find("not sealed"),
      std::string::npos);
  EXPECT_NE(refusal(memfd(MFD_ALLOW_SEALING, 65536, F_SEAL_SHRINK | F_SEAL_GROW), 65536)
                .find("not sealed"),
            std::string::npos);
  // Sealed right, but not the size the answer says.
  EXPECT_NE(refusal(memfd(MFD_ALLOW_SEALING, 65536, kAllSeals), 65536 * 2).find("size"),
            std::string::npos);
  // A pipe: no regular file.
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  FileDescriptor write_end(ends[1]);
  EXPECT_NE(refusal(FileDescriptor(ends[0]), 65536).find("not a regular file"), std::string::npos);
  // And a sealed memfd of the right size is taken.
  PeerMappings mappings;
  EXPECT_NO_THROW(mappings.adopt(1, 65536, true, memfd(MFD_ALLOW_SEALING, 65536, kAllSeals)));
}

TEST(PeerMappings, TakesEachBufferOnceAndAtMostTheLimit) {
  PeerMappings mappings;
  mappings.adopt(1, 4096, false, memfd(MFD_ALLOW_SEALING, 4096, kAllSeals));
  EXPECT_THROW(mappings.adopt(1, 4096, false, memfd(MFD_ALLOW_SEALING, 4096, kAllSeals)), Error);
  for (std::uint64_t buffer = 2; buffer <= kMaxSharedPerConnection; ++buffer)
    mappings.adopt(buffer, 4096, false, memfd(MFD_ALLOW_SEALING, 4096, kAllSeals));
  EXPECT_EQ(mappings.buffers(), kMaxSharedPerConnection);
  EXPECT_THROW(mappings.adopt(1000, 4096, false, memfd(MFD_ALLOW_SEALING, 4096, kAllSeals)), Error);
}

// However many spans the owner names, at most kMaxMappings stay mapped; an evicted one maps again.
TEST(PeerMappings, KeepsAtMostTheLimit) {
  PeerMappings mappings;
  const int before = test_support::shared_mappings();
  std::vector<SharedBuffer> buffers;
  const int count = static_cast<int>(PeerMappings::kMaxMappings) + 8;
  for (int i = 0; i < count; ++i) buffers.emplace_back(4096);
  for (auto& buffer : buffers) {
    give(mappings, buffer, false);
    (void)mappings.map(location_of(buffer), false);
  }
  EXPECT_LE(test_support::shared_mappings(),
            before + count + static_cast<int>(PeerMappings::kMaxMappings));
  test_support::fill_pattern(buffers.front().bytes(), 3);
  const auto first = location_of(buffers.front());
  auto again = mappings.map(first, false);
  EXPECT_EQ(test_support::first_mismatch(
                std::span<const std::byte>(again->base() + first.offset, 4096), 3),
            std::size_t{4096});
}

// Closing a SharedBuffer frees its pages even while a peer still holds its memfd.
TEST(PeerMappings, AClosedBufferKeepsNoPagesForAPeerThatHoldsIt) {
  PeerMappings mappings;
  SharedBuffer buffer(1 << 20);
  test_support::fill_pattern(buffer.bytes(), 5);
  const auto location = location_of(buffer);
  give(mappings, buffer, false);
  auto mapping = mappings.map(location, false);
  buffer.close();
  for (std::size_t i = 0; i < (1 << 20); i += 4096)
    ASSERT_EQ(mapping->base()[i], std::byte{0}) << "at " << i;
}

}  // namespace
