// One-shot operations between two processes of one host, both ends in GPU memory: the owner
// copies through CUDA IPC (docs/PROTOCOL.md, "CUDA IPC"). Needs a GPU and its driver; elsewhere
// the tests skip and say why.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "memwire/memwire.hpp"
#include "support/cuda_memory.hpp"
#include "support/pattern.hpp"
#include "support/test_peer_process.hpp"

using namespace memwire;
using namespace std::chrono_literals;
using memwire::detail::CudaDriver;
using memwire::test_support::DeviceBytes;

namespace {

// The shm offer of a one-shot operation over GPU memory says its owner takes CUDA IPC.
std::string cuda_ipc_attribute(const RdmaMetadata& metadata) {
  for (const auto& offer : metadata.endpoint().transports)
    if (offer.name == "shm")
      if (auto found = offer.attributes.find("cuda_ipc"); found != offer.attributes.end())
        return found->second;
  return "";
}

}  // namespace

// The peer (another process, its memory on the GPU) may pin no host memory at all: staging
// would be refused there, so the bytes can only have moved through CUDA IPC. The readable's
// device memory is changed after it was created: a read through IPC copies the device memory
// as it is at the read (a staged one would have given the bytes of the creation). The written
// bytes must reach the device and stay there (the owner's stand-ins are not copied over them).
TEST(CudaMultiProcess, OneShotGpuToGpuOnOneHostGoesThroughCudaIpc) {
  REQUIRE_CUDA();
  ConnectorOptions options;
  options.transports = {"shm"};
  Connector connector(options);
  constexpr std::size_t kSize = 24u << 20;
  DeviceBytes readable_memory(*driver, kSize), writable_memory(*driver, kSize);
  readable_memory.fill(5);
  writable_memory.fill(1);
  auto readable = connector.create_readable({readable_memory.descriptor()});
  auto writable = connector.create_writable({writable_memory.descriptor()});
  EXPECT_EQ(cuda_ipc_attribute(readable.metadata()), "2");
  EXPECT_EQ(cuda_ipc_attribute(writable.metadata()), "2");
  readable_memory.fill(6);
  const std::vector<std::string> environment{"MEMWIRE_PEER_CUDA=1", "MEMWIRE_TRANSPORTS=shm",
                                             "MEMWIRE_CUDA_STAGING_LIMIT=4096"};
  auto reader =
      test_support::start_test_peer({"active", "read", std::to_string(kSize), "6"}, environment);
  auto writer =
      test_support::start_test_peer({"active", "write", std::to_string(kSize), "7"}, environment);
  reader.write_line(readable.metadata().to_json());
  writer.write_line(writable.metadata().to_json());
  EXPECT_EQ(test_support::expect_line(reader), "begun");
  EXPECT_EQ(test_support::expect_line(reader), "complete shm");
  EXPECT_EQ(test_support::expect_line(writer), "begun");
  EXPECT_EQ(test_support::expect_line(writer), "complete shm");
  EXPECT_EQ(readable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(writable_memory.first_mismatch(7), kSize);
  EXPECT_EQ(reader.wait(10s), 0);
  EXPECT_EQ(writer.wait(10s), 0);
}

// A host-memory owner offers no CUDA IPC, and a GPU peer's one-shot operation is staged as
// before (an owner that predates one-shot CUDA IPC looks the same to the peer).
TEST(CudaOneShotIpc, HostMemoryIsNotOfferedThroughCudaIpc) {
  ConnectorOptions options;
  options.transports = {"shm", "tcp"};
  Connector connector(options);
  std::vector<std::byte> memory(4096);
  auto readable = connector.create_readable({Descriptor(std::span(memory))});
  EXPECT_EQ(cuda_ipc_attribute(readable.metadata()), "");
}
