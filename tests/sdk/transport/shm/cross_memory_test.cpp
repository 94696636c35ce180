// copy_to_process / copy_from_process of one range: a large one is copied in two halves at once
// (the caller's thread and the process's copy helper); every byte lands either way, nothing
// beside the range is touched, and a fault in either half is reported.
#include "transport/shm/cross_memory.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "support/pattern.hpp"

using namespace memwire::detail;
using memwire::test_support::fill_pattern;
using memwire::test_support::first_mismatch;

namespace {

constexpr std::size_t kGuard = 4096;

std::uint64_t address_of(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p); }

bool a_thread_named(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) return true;
  }
  return false;
}

}  // namespace

TEST(CrossMemory, EveryByteOfSmallAndSplitRangesInBothDirections) {
  // This process is "the other process" too: process_vm_readv/writev on our own pid.
  for (std::size_t length :
       {std::size_t{4096}, std::size_t{2} << 20, (std::size_t{8} << 20) + 12345}) {
    for (bool to : {true, false}) {
      std::vector<std::byte> source(length), destination(length + 2 * kGuard, std::byte{0xa5});
      fill_pattern(source, length + to);
      auto* into = destination.data() + kGuard;
      auto failure = to ? copy_to_process(::getpid(), address_of(into), source.data(), length)
                        : copy_from_process(::getpid(), address_of(source.data()), into, length);
      const auto where = ::testing::Message() << "length " << length << (to ? " to" : " from");
      ASSERT_FALSE(failure) << where << ": " << failure->what;
      EXPECT_EQ(first_mismatch({into, length}, length + to), length) << where;
      for (std::size_t i = 0; i < kGuard; ++i) {
        ASSERT_EQ(destination[i], std::byte{0xa5}) << where;
        ASSERT_EQ(destination[kGuard + length + i], std::byte{0xa5}) << where;
      }
    }
  }
  // The large ones were split: the helper is there (it names itself before its first copy).
  if (std::thread::hardware_concurrency() > 1) {
    EXPECT_TRUE(a_thread_named("memwire-copy"));
  }
}

TEST(CrossMemory, TheSecondCpusPartKeepsToPageTablesOfItsOwnAndToNearlyHalf) {
  constexpr std::uint64_t kTable = std::uint64_t{2} << 20;
  constexpr std::uint64_t kBase = std::uint64_t{0x7f12} << 32;  // table-aligned
  auto on_edge = [&](std::uint64_t theirs, std::size_t offset, std::size_t length) {
    return offset == 0 || offset == length || (theirs + offset) % kTable == 0;
  };
  for (std::size_t length : {std::size_t{4} << 20, (std::size_t{4} << 20) - 4096,
                             std::size_t{16} << 20, (std::size_t{8} << 20) + 12345}) {
    for (std::uint64_t skew = 0; skew < kTable; skew += 4096 * 7 + 64) {
      const std::uint64_t theirs = kBase + skew;
      const auto part = second_cpu_part(theirs, length);
      const auto where = ::testing::Message() << "length " << length << " skew " << skew;
      ASSERT_LT(part.begin, part.end) << where;
      ASSERT_LE(part.end, length) << where;
      const std::size_t size = part.end - part.begin;
      EXPECT_GE(size, length / 2 - length / 8) << where;
      EXPECT_LE(size, length / 2 + length / 8) << where;
      // Ranges over two tables or more split on their boundaries: no table is shared.
      EXPECT_TRUE(on_edge(theirs, part.begin, length) && on_edge(theirs, part.end, length))
          << where << ": part [" << part.begin << ", " << part.end << ")";
    }
  }
  // A 4 MiB chunk is split exactly in two at any alignment.
  for (std::uint64_t skew : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{1} << 20,
                             (std::uint64_t{3} << 19) + 64, kTable - 4096}) {
    const auto part = second_cpu_part(kBase + skew, std::size_t{4} << 20);
    EXPECT_EQ(part.end - part.begin, std::size_t{2} << 20) << "skew " << skew;
  }
  // Within one table there is no boundary to use: plain halves, whole pages.
  const auto one_table = second_cpu_part(kBase, std::size_t{2} << 20);
  EXPECT_EQ(one_table.begin, std::size_t{1} << 20);
  EXPECT_EQ(one_table.end, std::size_t{2} << 20);
  // An address whose range would wrap around: plain halves, no arithmetic past the end.
  for (std::uint64_t top : {UINT64_MAX - 4096, UINT64_MAX - (std::uint64_t{4} << 20),
                            UINT64_MAX - (std::uint64_t{5} << 20) + 1}) {
    const auto wrapping = second_cpu_part(top, std::size_t{4} << 20);
    EXPECT_EQ(wrapping.begin, std::size_t{2} << 20) << "at " << top;
    EXPECT_EQ(wrapping.end, std::size_t{4} << 20) << "at " << top;
  }
}

TEST(CrossMemory, EveryByteLandsWhateverTheOtherSidesAlignment) {
  // The split's parts follow the destination's 2 MiB boundaries: three pieces, not two.
  constexpr std::size_t kTable = std::size_t{2} << 20;
  constexpr std::size_t kLength = (std::size_t{4} << 20) + 12345;
  const std::size_t mapped_length = kLength + 2 * kTable + 2 * kGuard;
  void* mapped =
      ::mmap(nullptr, mapped_length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* base = static_cast<std::byte*>(mapped);
  auto* aligned = base + (kTable - address_of(base) % kTable) % kTable;
  std::vector<std::byte> source(kLength);
  fill_pattern(source, 7);
  for (std::size_t skew : {std::size_t{0}, std::size_t{64}, std::size_t{1} << 20,
                           (std::size_t{3} << 19) + 64, kTable - 4096}) {
    for (bool to : {true, false}) {
      std::fill(base, base + mapped_length, std::byte{0xa5});
      auto* theirs = aligned + kGuard + skew;
      std::vector<std::byte> ours(kLength, std::byte{0});
      if (!to) std::copy(source.begin(), source.end(), theirs);
      auto failure = to ? copy_to_process(::getpid(), address_of(theirs), source.data(), kLength)
                        : copy_from_process(::getpid(), address_of(theirs), ours.data(), kLength);
      const auto where = ::testing::Message() << "skew " << skew << (to ? " to" : " from");
      ASSERT_FALSE(failure) << where << ": " << failure->what;
      EXPECT_EQ(first_mismatch({to ? theirs : ours.data(), kLength}, 7), kLength) << where;
      if (to) {
        EXPECT_EQ(theirs[-1], std::byte{0xa5}) << where;
        EXPECT_EQ(theirs[kLength], std::byte{0xa5}) << where;
      }
    }
  }
  ::munmap(mapped, mapped_length);
}

TEST(CrossMemory, AFaultInEitherHalfOfASplitCopyIsReported) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t kLength = std::size_t{8} << 20;
  // The other side's range has a hole near its start, in its middle (the helper's part, however
  // the range is aligned), then near its end (the caller's parts).
  for (std::size_t hole : {page, kLength / 2, kLength - 2 * page}) {
    void* mapped =
        ::mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mapped, MAP_FAILED);
    auto* theirs = static_cast<std::byte*>(mapped);
    ASSERT_EQ(::munmap(theirs + hole, page), 0);
    std::vector<std::byte> ours(kLength);
    EXPECT_TRUE(copy_from_process(::getpid(), address_of(theirs), ours.data(), kLength))
        << "hole at " << hole;
    EXPECT_TRUE(copy_to_process(::getpid(), address_of(theirs), ours.data(), kLength))
        << "hole at " << hole;
    ::munmap(theirs, hole);
    ::munmap(theirs + hole + page, kLength - hole - page);
  }
}

TEST(CrossMemory, ManyBlocksOfBothSidesLandEveryByteAndFaultsInEitherHalfAreReported) {
  // A scattered pool READ's shape, large enough to be split over two CPUs: their blocks of
  // 16 KiB every 32 KiB, ours of 8 KiB every 12 KiB (the halves' cut falls inside blocks of one
  // side or the other); nothing between the blocks may be touched, in either direction.
  constexpr std::size_t kTheirBlock = 16 << 10, kTheirStride = 32 << 10, kTheirBlocks = 160;
  constexpr std::size_t kOurBlock = 8 << 10, kOurStride = 12 << 10;
  constexpr std::size_t kTotal = kTheirBlock * kTheirBlocks;  // 2.5 MiB
  constexpr std::size_t kOurBlocks = kTotal / kOurBlock;
  for (bool to : {true, false}) {
    std::vector<std::byte> there(kTheirStride * kTheirBlocks, std::byte{0xa5}),
        here(kOurStride * kOurBlocks, std::byte{0xa5});
    std::vector<std::byte> expected(kTotal);
    fill_pattern(expected, 90 + to);
    std::vector<iovec> theirs, ours;
    for (std::size_t i = 0; i < kTheirBlocks; ++i)
      theirs.push_back({there.data() + i * kTheirStride, kTheirBlock});
    for (std::size_t i = 0; i < kOurBlocks; ++i)
      ours.push_back({here.data() + i * kOurStride, kOurBlock});
    // The source side holds the pattern, block after block.
    const auto& source = to ? ours : theirs;
    std::size_t at = 0;
    for (const auto& block : source) {
      std::memcpy(block.iov_base, expected.data() + at, block.iov_len);
      at += block.iov_len;
    }
    auto failure = to ? copy_to_process(::getpid(), theirs, ours)
                      : copy_from_process(::getpid(), theirs, ours);
    ASSERT_FALSE(failure) << failure->what;
    const auto& landed = to ? theirs : ours;
    const auto& memory = to ? there : here;
    const std::size_t block = to ? kTheirBlock : kOurBlock, stride = to ? kTheirStride : kOurStride;
    std::vector<std::byte> gathered;
    for (const auto& part : landed) {
      const auto* bytes = static_cast<const std::byte*>(part.iov_base);
      gathered.insert(gathered.end(), bytes, bytes + part.iov_len);
    }
    EXPECT_TRUE(gathered == expected) << (to ? "to" : "from");
    for (std::size_t offset = 0; offset < memory.size(); ++offset) {
      if (offset % stride >= block) {
        ASSERT_EQ(memory[offset], std::byte{0xa5}) << "touched between blocks at " << offset;
      }
    }
  }
  // A hole in their first block, or in their last (the other CPU's half): reported.
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t hole_block : {std::size_t{0}, kTheirBlocks - 1}) {
    void* mapped = ::mmap(nullptr, kTheirStride * kTheirBlocks, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mapped, MAP_FAILED);
    auto* there = static_cast<std::byte*>(mapped);
    // Not unmapped: a sanitizer's own mappings may land in a hole; a page without access stays.
    ASSERT_EQ(::mprotect(there + hole_block * kTheirStride, page, PROT_NONE), 0);
    std::vector<iovec> theirs;
    for (std::size_t i = 0; i < kTheirBlocks; ++i)
      theirs.push_back({there + i * kTheirStride, kTheirBlock});
    std::vector<std::byte> here(kTotal);
    const iovec ours{here.data(), kTotal};
    const auto reading = copy_from_process(::getpid(), theirs, std::span(&ours, 1));
    EXPECT_TRUE(reading) << "hole in block " << hole_block;
    const auto writing = copy_to_process(::getpid(), theirs, std::span(&ours, 1));
    EXPECT_TRUE(writing) << "hole in block " << hole_block;
    // The kernel's reason, from whichever CPU met the hole (direct reads tell refusals apart).
    if (reading) {
      EXPECT_EQ(reading->error, EFAULT) << reading->what;
    }
    if (writing) {
      EXPECT_EQ(writing->error, EFAULT) << writing->what;
    }
    ::munmap(there, kTheirStride * kTheirBlocks);
  }
}

TEST(CrossMemory, CopiesFromManyThreadsAtOnceAllLand) {
  // One helper per process: callers that find it busy copy their whole range themselves.
  constexpr std::size_t kLength = std::size_t{4} << 20;
  constexpr int kThreads = 4;
  std::vector<std::vector<std::byte>> sources(kThreads), destinations(kThreads);
  std::vector<std::thread> threads;
  std::vector<char> failed(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    sources[t].resize(kLength);
    destinations[t].resize(kLength);
    fill_pattern(sources[t], 100 + t);
  }
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 8 && !failed[t]; ++round)
        failed[t] = copy_to_process(::getpid(), address_of(destinations[t].data()),
                                    sources[t].data(), kLength)
                        .has_value();
    });
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_FALSE(failed[t]) << "thread " << t;
    EXPECT_EQ(first_mismatch(destinations[t], 100 + t), kLength) << "thread " << t;
  }
}
