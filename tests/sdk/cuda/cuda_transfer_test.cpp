// CUDA descriptors (sdk/src/cuda/). Needs a GPU and its driver (libcuda.so.1): elsewhere every
// test here skips and says why, except the one that checks the refusal without a driver.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "cuda/pinned_pool.hpp"
#include "memwire/memwire.hpp"
#include "support/cuda_memory.hpp"
#include "support/error_code_of.hpp"
#include "support/pattern.hpp"
#include "support/tcp_only.hpp"
#include "support/test_peer_process.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::detail::CudaDriver;
using namespace memwire::test_support;

TEST(CudaOptions, StagingLimitComesFromTheEnvironment) {
  ::setenv("MEMWIRE_CUDA_STAGING_LIMIT", "1048576", 1);
  EXPECT_EQ(ConnectorOptions::from_environment().cuda_staging_limit, 1u << 20);
  ::setenv("MEMWIRE_CUDA_STAGING_LIMIT", "lots", 1);
  EXPECT_THROW(ConnectorOptions::from_environment(), Error);
  ::unsetenv("MEMWIRE_CUDA_STAGING_LIMIT");
  EXPECT_EQ(ConnectorOptions{}.cuda_staging_limit, std::uint64_t{4} << 30);
}

// Without a driver, the same build refuses cuda:N as before, and says why.
TEST(CudaWithoutDriver, CudaDescriptorsAreRefusedWithTheReason) {
  if (CudaDriver::get() != nullptr) GTEST_SKIP() << "a CUDA driver is loaded here";
  Connector connector(transport_only("tcp"));
  std::byte byte{};
  const auto action = [&] {
    (void)connector.create_readable({Descriptor(&byte, 1, Device::parse("cuda:0"))});
  };
  EXPECT_EQ(test_support::error_code_of(action), ErrorCode::InvalidArgument);
  EXPECT_NE(message_of(action).find("needs the CUDA driver"), std::string::npos)
      << message_of(action);
}

TEST(CudaDescriptors, HostMemoryNamedCudaIsRefused) {
  REQUIRE_CUDA();
  Connector connector(transport_only("tcp"));
  std::vector<std::byte> host(64);
  const auto action = [&] {
    (void)connector.create_readable(
        {Descriptor(host.data(), host.size(), Device::parse("cuda:0"))});
  };
  EXPECT_EQ(test_support::error_code_of(action), ErrorCode::InvalidArgument);
  EXPECT_NE(message_of(action).find("not CUDA device memory"), std::string::npos)
      << message_of(action);
}

TEST(CudaDescriptors, RangePastTheAllocationIsRefused) {
  REQUIRE_CUDA();
  Connector connector(transport_only("tcp"));
  DeviceBytes buffer(*driver, 4096);
  const auto action = [&] {
    (void)connector.create_writable(
        {Descriptor(buffer.data() + 1024, 4096, Device::parse("cuda:0"))});
  };
  EXPECT_EQ(test_support::error_code_of(action), ErrorCode::InvalidArgument);
  EXPECT_NE(message_of(action).find("past the end of their CUDA allocation"), std::string::npos)
      << message_of(action);
}

TEST(CudaDescriptors, ADeviceThatIsNotThereIsRefused) {
  REQUIRE_CUDA();
  Connector connector(transport_only("tcp"));
  DeviceBytes buffer(*driver, 4096);
  const auto action = [&] {
    (void)connector.create_readable(
        {Descriptor(buffer.data(), buffer.size(), Device(DeviceKind::Cuda, 7))});
  };
  EXPECT_EQ(test_support::error_code_of(action), ErrorCode::InvalidArgument);
  EXPECT_NE(message_of(action).find("cuda:7 does not exist"), std::string::npos)
      << message_of(action);
}

TEST(CudaDescriptors, StagingPastItsLimitIsRefusedAndGivenBackWhenTheOperationEnds) {
  REQUIRE_CUDA();
  auto options = transport_only("tcp");
  options.cuda_staging_limit = 1u << 20;
  Connector connector(options);
  DeviceBytes buffer(*driver, 1u << 20);
  {
    auto held = connector.create_writable({buffer.descriptor()});
    const auto action = [&] { (void)connector.create_readable({buffer.descriptor(0, 4096)}); };
    EXPECT_EQ(test_support::error_code_of(action), ErrorCode::Transport);
    EXPECT_NE(message_of(action).find("cuda_staging_limit"), std::string::npos)
        << message_of(action);
  }
  auto again = connector.create_readable({buffer.descriptor()});
  EXPECT_EQ(again.metadata().descriptors().front().device.to_string(), "cuda:0");
}

TEST(CudaPinnedPool, ReusesAGivenBackBufferAndFreesKeptOnesToMakeRoom) {
  REQUIRE_CUDA();
  detail::PinnedPool pool(*driver, 8u << 20);
  auto first = pool.acquire(3u << 20);
  pool.release(first);
  EXPECT_EQ(pool.kept(), 3u << 20);
  // About the same size: the same pages, not pinned again.
  auto again = pool.acquire((3u << 20) - 100);
  EXPECT_EQ(again.data, first.data);
  EXPECT_EQ(pool.kept(), 0u);
  pool.release(again);
  // Too large to reuse it, and with it kept the limit would pass: it is freed first.
  auto large = pool.acquire(7u << 20);
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(pool.in_use(), 7u << 20);
  EXPECT_EQ(test_support::error_code_of([&] { (void)pool.acquire(2u << 20); }),
            ErrorCode::Transport);
  pool.release(large);
}

// GPU memory on both ends, over each transport that runs on one host.
class CudaTransfer : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTransfer, ReadFromGpuIntoGpu) {
  REQUIRE_CUDA();
  // The log says which way the GPU's bytes went.
  std::mutex log_mutex;
  std::string log;
  auto logged = transport_only(GetParam());
  logged.log_level = LogLevel::Debug;
  logged.log = [&](std::string_view line) {
    std::lock_guard lock(log_mutex);
    log.append(line).append("\n");
  };
  Connector owner(logged), reader(transport_only(GetParam()));
  constexpr std::size_t kSize = 48u << 20;
  DeviceBytes source(*driver, kSize), target(*driver, kSize);
  source.fill(11);
  // Three descriptors of different sizes over one allocation each side.
  const std::vector<Descriptor> from{source.descriptor(0, 1000), source.descriptor(1000, 9u << 20),
                                     source.descriptor(1000 + (9u << 20))};
  const std::vector<Descriptor> into{target.descriptor(0, 1000), target.descriptor(1000, 9u << 20),
                                     target.descriptor(1000 + (9u << 20))};
  auto readable = owner.create_readable(from);
  auto read = reader.begin_read(readable.metadata(), into);
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(readable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(read.transport(), GetParam());
  EXPECT_EQ(target.first_mismatch(11), kSize);
  EXPECT_EQ(read.results()[1].ptr(), into[1].ptr());  // the caller's memory, not the stand-in
  std::lock_guard lock(log_mutex);
  EXPECT_NE(log.find("\"event\":\"cuda_staged\""), std::string::npos) << log;
  EXPECT_NE(log.find("staged through pinned host memory"), std::string::npos) << log;
}

TEST_P(CudaTransfer, WriteFromGpuIntoGpu) {
  REQUIRE_CUDA();
  Connector owner(transport_only(GetParam())), writer(transport_only(GetParam()));
  constexpr std::size_t kSize = 40u << 20;
  DeviceBytes source(*driver, kSize), target(*driver, kSize);
  source.fill(12);
  auto writable = owner.create_writable({target.descriptor()});
  auto write = writer.begin_write({source.descriptor()}, writable.metadata());
  EXPECT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.transport(), GetParam());
  EXPECT_EQ(target.first_mismatch(12), kSize);
}

TEST_P(CudaTransfer, HostAndGpuEndsPair) {
  REQUIRE_CUDA();
  Connector gpu_side(transport_only(GetParam())), host_side(transport_only(GetParam()));
  constexpr std::size_t kSize = 8u << 20;
  DeviceBytes device(*driver, kSize);
  std::vector<std::byte> host(kSize);
  test_support::fill_pattern(host, 13);
  // Host readable -> GPU reader.
  auto readable = host_side.create_readable({Descriptor(std::span(host))});
  auto read = gpu_side.begin_read(readable.metadata(), {device.descriptor()});
  EXPECT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(device.first_mismatch(13), kSize);
  // GPU writer -> host writable.
  device.fill(14);
  std::vector<std::byte> landed(kSize);
  auto writable = host_side.create_writable({Descriptor(std::span(landed))});
  auto write = gpu_side.begin_write({device.descriptor()}, writable.metadata());
  EXPECT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(test_support::first_mismatch(landed, 14), kSize);
}

INSTANTIATE_TEST_SUITE_P(Transports, CudaTransfer, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

// Another process (host memory) reads this process's GPU memory and writes into it, over shm
// when the kernel allows it, else tcp.
TEST(CudaMultiProcess, AnotherProcessReadsAndWritesOurGpuMemory) {
  REQUIRE_CUDA();
  ConnectorOptions options;
  options.transports = {"shm", "tcp"};
  Connector connector(options);
  constexpr std::size_t kSize = 16u << 20;
  DeviceBytes readable_memory(*driver, kSize), writable_memory(*driver, kSize);
  readable_memory.fill(3);
  auto readable = connector.create_readable({readable_memory.descriptor()});
  auto writable = connector.create_writable({writable_memory.descriptor()});
  auto reader = test_support::start_test_peer({"active", "read", std::to_string(kSize), "3"});
  auto writer = test_support::start_test_peer({"active", "write", std::to_string(kSize), "4"});
  reader.write_line(readable.metadata().to_json());
  writer.write_line(writable.metadata().to_json());
  EXPECT_EQ(readable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable_memory.first_mismatch(4), kSize);
  EXPECT_EQ(test_support::expect_line(reader), "begun");
  EXPECT_EQ(test_support::expect_line(reader), "complete " + readable.transport());
  EXPECT_EQ(reader.wait(10s), 0);
  EXPECT_EQ(writer.wait(10s), 0);
}
