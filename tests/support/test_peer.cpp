// The other OS process in multi-process tests. Metadata travels over its stdin/stdout.
//   memwire_test_peer publish readable|writable SIZE SEED   prints metadata, waits, verifies
//   memwire_test_peer publish pool SIZE SEED   a pool of 4 KiB blocks: prints its metadata,
//                                              stays until stdin closes or says "quit"; on
//                                              "verify" says "intact" or "changed at N", on
//                                              "fill SEED2" writes that pattern ("filled"), on
//                                              "close" closes the pool ("closed")
//   memwire_test_peer active read|write SIZE SEED [CHUNK]   reads metadata from stdin
// Prints "complete" or "error <reason>" as its last line; exit code 0 only on success.
// MEMWIRE_PEER_SHARED=1: the buffer is a SharedBuffer (which a same-host peer maps).
// MEMWIRE_PEER_POOL_READ_ONLY=1: the pool forbids remote writes (PoolOptions::remote_write).
// MEMWIRE_PEER_NOFILE=N: at most N open file descriptors (RLIMIT_NOFILE), for fd exhaustion.
// MEMWIRE_PEER_CUDA=1: the buffer is GPU memory on cuda:0 (filled and checked through host
// copies); the peer says "error no CUDA ..." when this process has no driver.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "memwire/memwire.hpp"
#include "support/pattern.hpp"

using namespace memwire;

namespace {

using memwire::detail::CudaDriver;

// GPU memory of this process (MEMWIRE_PEER_CUDA=1), freed with it.
struct DeviceMemory {
  const CudaDriver* driver = nullptr;
  void* memory = nullptr;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (memory != nullptr) driver->free_device(memory);
  }
};

int finish(Operation& operation, std::span<std::byte> buffer, bool verify, std::uint64_t seed,
           const DeviceMemory& device_memory) {
  try {
    operation.wait_for_completion(std::chrono::seconds(60));
  } catch (const Error& error) {
    std::cout << "error " << error.what() << std::endl;
    return 1;
  }
  if (verify && device_memory.memory != nullptr)
    device_memory.driver->copy_to_host(buffer.data(), device_memory.memory, buffer.size());
  if (verify) {
    auto bad = test_support::first_mismatch(buffer, seed);
    if (bad != buffer.size()) {
      std::cout << "error byte " << bad << " differs" << std::endl;
      return 1;
    }
  }
  std::cout << "complete " << operation.transport() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: memwire_test_peer publish|active KIND SIZE SEED [CHUNK]\n";
    return 2;
  }
  const std::string role = argv[1], kind = argv[2];
  const auto size = std::strtoull(argv[3], nullptr, 10);
  const auto seed = std::strtoull(argv[4], nullptr, 10);
  // MEMWIRE_PEER_AS_NOBODY=1: run unprivileged, so the kernel refuses cross-memory access.
  if (const char* drop = std::getenv("MEMWIRE_PEER_AS_NOBODY"); drop && drop[0] == '1') {
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      std::cout << "error cannot drop privileges" << std::endl;
      return 1;
    }
  }
  if (const char* limit = std::getenv("MEMWIRE_PEER_NOFILE")) {
    rlimit files{};
    files.rlim_cur = files.rlim_max = std::strtoull(limit, nullptr, 10);
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
      std::cout << "error cannot limit open files" << std::endl;
      return 1;
    }
  }
  // MEMWIRE_TRANSPORTS and the other documented settings: a conformance case runs its peer on
  // the transport under test.
  DeviceMemory device_memory;  // outlives the connector
  auto options = ConnectorOptions::from_environment();
  if (argc > 5) options.tcp.chunk_size = std::strtoull(argv[5], nullptr, 10);
  Connector connector(options);
  const char* shared_wanted = std::getenv("MEMWIRE_PEER_SHARED");
  std::optional<SharedBuffer> shared;
  std::vector<std::byte> plain;
  std::span<std::byte> buffer;
  if (shared_wanted && shared_wanted[0] == '1') {
    buffer = shared.emplace(size).bytes();
  } else {
    plain.resize(size);
    buffer = plain;
  }
  std::vector<Descriptor> descriptors{Descriptor(buffer)};
  // Filled before an operation starts: a pattern written into `buffer` is copied to the GPU.
  auto to_device = [&] {
    if (device_memory.memory != nullptr)
      device_memory.driver->copy_to_device(device_memory.memory, buffer.data(), buffer.size());
  };
  if (const char* cuda = std::getenv("MEMWIRE_PEER_CUDA"); cuda && cuda[0] == '1') {
    device_memory.driver = CudaDriver::get();
    if (device_memory.driver == nullptr) {
      std::cout << "error no CUDA here: " << CudaDriver::unavailable_reason() << std::endl;
      return 1;
    }
    device_memory.driver->use_device(0);
    device_memory.memory = device_memory.driver->allocate_device(size);
    descriptors = {Descriptor(device_memory.memory, size, Device(DeviceKind::Cuda, 0))};
  }
  try {
    if (role == "publish") {
      if (kind == "pool") {
        test_support::fill_pattern(buffer, seed);
        PoolOptions pool_options;
        const char* read_only = std::getenv("MEMWIRE_PEER_POOL_READ_ONLY");
        pool_options.remote_write = !(read_only && read_only[0] == '1');
        auto pool = connector.register_pool({{buffer.data(), 4096, 0, buffer.size() / 4096, {}}},
                                            pool_options);
        std::cout << pool.metadata().to_json() << std::endl;
        auto expected = seed;
        for (std::string line; std::getline(std::cin, line) && line != "quit";) {
          if (line == "verify") {
            const auto bad = test_support::first_mismatch(buffer, expected);
            if (bad == buffer.size())
              std::cout << "intact" << std::endl;
            else
              std::cout << "changed at " << bad << std::endl;
          } else if (line.starts_with("fill ")) {
            expected = std::strtoull(line.c_str() + 5, nullptr, 10);
            test_support::fill_pattern(buffer, expected);
            std::cout << "filled" << std::endl;
          } else if (line == "close") {
            pool.close("the test closed it");
            std::cout << "closed" << std::endl;
          }
        }
        std::cout << "complete" << std::endl;
        return 0;
      }
      if (kind == "readable") {
        test_support::fill_pattern(buffer, seed);
        to_device();
        auto operation = connector.create_readable(descriptors);
        std::cout << operation.metadata().to_json() << std::endl;
        return finish(operation, buffer, false, seed, device_memory);
      }
      auto operation = connector.create_writable(descriptors);
      std::cout << operation.metadata().to_json() << std::endl;
      return finish(operation, buffer, true, seed, device_memory);
    }
    std::string line;
    std::getline(std::cin, line);
    auto remote = RdmaMetadata::from_json(line);
    if (kind == "read") {
      auto operation = connector.begin_read(remote, descriptors);
      std::cout << "begun" << std::endl;
      return finish(operation, buffer, true, seed, device_memory);
    }
    test_support::fill_pattern(buffer, seed);
    to_device();
    auto operation = connector.begin_write(descriptors, remote);
    std::cout << "begun" << std::endl;
    return finish(operation, buffer, false, seed, device_memory);
  } catch (const Error& error) {
    std::cout << "error " << error.what() << std::endl;
    return 1;
  }
}
