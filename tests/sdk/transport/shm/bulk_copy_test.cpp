// copy_bulk: every byte of a large chunk lands, whatever the alignment of either end, and
// nothing beside the destination range is touched. Sources are filled a word at a time
// (fill_pattern) and compared with memcmp: byte loops took most of these tests' 7-27 s under
// the sanitizers.
#include "transport/shm/bulk_copy.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include "support/pattern.hpp"

using namespace memwire::detail;
using memwire::test_support::fill_pattern;

namespace {

// memcmp, not std::equal: TSan checked std::equal's loop a byte at a time.
bool same(const std::byte* a, const std::byte* b, std::size_t length) {
  return std::memcmp(a, b, length) == 0;
}

}  // namespace

TEST(BulkCopy, EveryByteAtAnyAlignmentAndNothingBeside) {
  constexpr std::size_t kGuard = 128;
  for (std::size_t length :
       {std::size_t{1}, std::size_t{4095}, kBulkCopyThreshold - 1, kBulkCopyThreshold,
        kBulkCopyThreshold + 63, 3 * kBulkCopyThreshold + 5}) {
    for (std::size_t source_offset : {0, 1, 17, 64}) {
      for (std::size_t destination_offset : {0, 3, 48, 63}) {
        std::vector<std::byte> source(length + source_offset);
        fill_pattern(source, length);
        std::vector<std::byte> destination(length + destination_offset + 2 * kGuard,
                                           std::byte{0xa5});
        copy_bulk(destination.data() + kGuard + destination_offset, source.data() + source_offset,
                  length);
        const auto* copied = destination.data() + kGuard + destination_offset;
        const std::vector<std::byte> guard(kGuard + destination_offset, std::byte{0xa5});
        const auto where = ::testing::Message() << "length " << length << " offsets "
                                                << source_offset << "/" << destination_offset;
        ASSERT_TRUE(same(guard.data(), destination.data(), guard.size())) << where;
        ASSERT_TRUE(same(copied, source.data() + source_offset, length)) << where;
        ASSERT_TRUE(same(guard.data(), copied + length, kGuard)) << where;
      }
    }
  }
}

// copy_bulk_split: the same from two threads (halves meeting on a destination cache line),
// and two split copies at once (one of them copies alone: one helper at a time).
TEST(BulkCopy, SplitCopiesEveryByteAndNothingBesideEvenTwoAtOnce) {
  constexpr std::size_t kGuard = 128;
  auto check = [](std::size_t length, std::size_t destination_offset) {
    std::vector<std::byte> source(length);
    fill_pattern(source, length);
    std::vector<std::byte> destination(length + destination_offset + 2 * kGuard, std::byte{0xa5});
    auto* copied = destination.data() + kGuard + destination_offset;
    copy_bulk_split(copied, source.data(), length);
    const std::vector<std::byte> guard(kGuard + destination_offset, std::byte{0xa5});
    return same(guard.data(), destination.data(), guard.size()) &&
           same(copied, source.data(), length) && same(guard.data(), copied + length, kGuard);
  };
  for (std::size_t length : {kSplitCopyThreshold - 1, kSplitCopyThreshold, kSplitCopyThreshold + 77,
                             3 * kSplitCopyThreshold + 5}) {
    for (std::size_t destination_offset : {0, 3, 63}) {
      bool other = false;
      std::thread beside([&] { other = check(length + 64, destination_offset); });
      EXPECT_TRUE(check(length, destination_offset))
          << "length " << length << " offset " << destination_offset;
      beside.join();
      EXPECT_TRUE(other) << "beside: length " << length + 64 << " offset " << destination_offset;
    }
  }
}
