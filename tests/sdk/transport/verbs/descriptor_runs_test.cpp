// Descriptors end to end in memory share one region and one key (DescriptorRuns); nothing here
// needs an RDMA device.
#include "transport/verbs/descriptor_runs.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

using namespace memwire;
using namespace memwire::detail::verbs;

namespace {

TEST(DescriptorRuns, DescriptorsEndToEndFormOneRun) {
  std::vector<std::byte> buffer(4 * 4096);
  std::vector<Descriptor> descriptors;
  for (std::size_t i = 0; i < 4; ++i) descriptors.emplace_back(buffer.data() + i * 4096, 4096);
  const auto runs = runs_of(descriptors);
  ASSERT_EQ(runs.runs.size(), 1u);
  EXPECT_EQ(runs.runs[0].ptr(), buffer.data());
  EXPECT_EQ(runs.runs[0].size(), buffer.size());
  EXPECT_EQ(runs.run_of, (std::vector<std::size_t>{0, 0, 0, 0}));
  EXPECT_EQ(runs.offset_in_run, (std::vector<std::uint64_t>{0, 4096, 8192, 12288}));
}

TEST(DescriptorRuns, AGapOrAStepBackStartsAnotherRunAndCoversNothingBetween) {
  std::vector<std::byte> buffer(8 * 4096);
  auto* base = buffer.data();
  const std::vector<Descriptor> descriptors{
      {base, 4096},         // run 0
      {base + 4096, 100},   // run 0: end to end
      {base + 8192, 4096},  // run 1: a gap of 3996 bytes before it
      {base, 4096},         // run 2: memory already covered, in another order
      {base + 4096, 0},     // empty: no run
      {base + 4096, 4096},  // run 2: follows the last non-empty one
  };
  const auto runs = runs_of(descriptors);
  ASSERT_EQ(runs.runs.size(), 3u);
  EXPECT_EQ(runs.runs[0].ptr(), base);
  EXPECT_EQ(runs.runs[0].size(), 4196u);
  EXPECT_EQ(runs.runs[1].ptr(), base + 8192);
  EXPECT_EQ(runs.runs[1].size(), 4096u);
  EXPECT_EQ(runs.runs[2].ptr(), base);
  EXPECT_EQ(runs.runs[2].size(), 8192u);
  EXPECT_EQ(runs.run_of, (std::vector<std::size_t>{0, 0, 1, 2, DescriptorRuns::kNone, 2}));
  EXPECT_EQ(runs.offset_in_run, (std::vector<std::uint64_t>{0, 4096, 0, 0, 0, 4096}));
}

}  // namespace
