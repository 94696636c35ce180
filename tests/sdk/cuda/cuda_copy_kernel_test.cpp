// The GPU copy kernel (sdk/src/cuda/kernels/copy_runs.cu) behind copy_runs: many runs of any
// length and alignment, device to device and through a host buffer. Needs a GPU: elsewhere
// every test here skips and says why.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_copies.hpp"
#include "cuda/cuda_driver.hpp"
#include "cuda/kernel_copies.hpp"
#include "memwire/error.hpp"
#include "support/cuda_memory.hpp"
#include "support/pattern.hpp"

namespace memwire::detail {
extern const char kCopyRunsPtx[];
}

using namespace memwire;
using namespace memwire::detail;
using memwire::test_support::DeviceBytes;

namespace {

struct Planned {
  std::size_t from, to, length;
};

// 200 runs of 1 byte to 70 KiB at any offset of a 16 MiB source, to distinct places of a
// destination of the same size (back to back with odd gaps).
std::vector<Planned> plan_runs(std::size_t size) {
  std::mt19937_64 random(33);
  std::vector<Planned> runs;
  std::size_t to = 0;
  while (runs.size() < 200) {
    const std::size_t length = 1 + random() % (70 * 1024);
    const std::size_t from = random() % (size - length);
    if (to + length > size) break;
    runs.push_back({from, to, length});
    to += length + (random() % 3 == 0 ? random() % 17 : 0);
  }
  return runs;
}

constexpr std::size_t kSize = 16 << 20;

TEST(CudaCopyKernel, LoadsWhenTheBuildHasIt) {
  REQUIRE_CUDA();
  const auto path = copy_path(*driver, 0);
  if (kCopyRunsPtx[0] == '\0') GTEST_SKIP() << "this build has no PTX: " << path;
  EXPECT_EQ(path, "kernel");
}

TEST(CudaCopyKernel, ManyRunsDeviceToDevice) {
  REQUIRE_CUDA();
  std::vector<std::byte> source(kSize), expected(kSize), got(kSize);
  test_support::fill_pattern(source, 7);
  test_support::fill_pattern(expected, 8);
  DeviceBytes from(*driver, kSize), to(*driver, kSize);
  driver->copy_to_device(from.data(), source.data(), kSize);
  driver->copy_to_device(to.data(), expected.data(), kSize);
  std::vector<CopyRun> runs;
  for (const auto& run : plan_runs(kSize)) {
    runs.push_back({to.data() + run.to, from.data() + run.from, run.length});
    std::copy_n(source.begin() + run.from, run.length, expected.begin() + run.to);
  }
  copy_runs(*driver, 0, runs, CopyDirection::DeviceToDevice);
  driver->copy_to_host(got.data(), to.data(), kSize);
  EXPECT_TRUE(got == expected) << "first difference at "
                               << (std::mismatch(got.begin(), got.end(), expected.begin()).first -
                                   got.begin());
}

TEST(CudaCopyKernel, ManyRunsThroughHostAndBack) {
  REQUIRE_CUDA();
  std::vector<std::byte> source(kSize), host(kSize), expected_host(kSize);
  test_support::fill_pattern(source, 9);
  test_support::fill_pattern(host, 10);
  expected_host = host;
  DeviceBytes from(*driver, kSize), back(*driver, kSize);
  driver->copy_to_device(from.data(), source.data(), kSize);
  const auto planned = plan_runs(kSize);
  std::vector<CopyRun> gather, scatter;
  for (const auto& run : planned) {
    gather.push_back({host.data() + run.to, from.data() + run.from, run.length});
    scatter.push_back({back.data() + run.from, host.data() + run.to, run.length});
    std::copy_n(source.begin() + run.from, run.length, expected_host.begin() + run.to);
  }
  copy_runs(*driver, 0, gather, CopyDirection::DeviceToHost);
  ASSERT_TRUE(host == expected_host) << "gather: host bytes between runs must not change either";
  std::vector<std::byte> zeros(kSize), got(kSize);
  driver->copy_to_device(back.data(), zeros.data(), kSize);
  copy_runs(*driver, 0, scatter, CopyDirection::HostToDevice);
  driver->copy_to_host(got.data(), back.data(), kSize);
  for (const auto& run : planned)
    ASSERT_TRUE(std::equal(got.begin() + run.from, got.begin() + run.from + run.length,
                           source.begin() + run.from))
        << "scatter: run of " << run.length << " at " << run.from;
}

TEST(CudaCopyKernel, RefusesARunThatWrapsAround) {
  REQUIRE_CUDA();
  const auto& kernel = CopyKernel::of(*driver, 0);
  if (!kernel.available()) GTEST_SKIP() << kernel.unavailable_reason();
  DeviceBytes to(*driver, 4096);
  const CopyRun runs[] = {{to.data(), to.data() + 1024, 64},
                          {to.data(), reinterpret_cast<const void*>(UINTPTR_MAX - 10), 100}};
  DeviceBuffer table(*driver);
  try {
    kernel.launch(runs, table, nullptr);
    FAIL() << "a run past the end of the address space was launched";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("copy run 1"), std::string::npos) << error.what();
  }
}

}  // namespace
