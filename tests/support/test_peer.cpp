// The other OS process in multi-process tests. Metadata travels over its stdin/stdout.
//   memwire_test_peer publish readable|writable SIZE SEED   prints metadata, waits, verifies
//   memwire_test_peer active read|write SIZE SEED [CHUNK]   reads metadata from stdin
// Prints "complete" or "error <reason>" as its last line; exit code 0 only on success.
// MEMWIRE_PEER_SHARED=1: the buffer is a SharedBuffer (which a same-host peer maps).
// MEMWIRE_PEER_NOFILE=N: at most N open file descriptors (RLIMIT_NOFILE), for fd exhaustion.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"

using namespace memwire;

namespace {

int finish(Operation& operation, std::span<std::byte> buffer, bool verify, std::uint64_t seed) {
  try {
    operation.wait_for_completion(std::chrono::seconds(60));
  } catch (const Error& error) {
    std::cout << "error " << error.what() << std::endl;
    return 1;
  }
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
  try {
    if (role == "publish") {
      if (kind == "readable") {
        test_support::fill_pattern(buffer, seed);
        auto operation = connector.create_readable(descriptors);
        std::cout << operation.metadata().to_json() << std::endl;
        return finish(operation, buffer, false, seed);
      }
      auto operation = connector.create_writable(descriptors);
      std::cout << operation.metadata().to_json() << std::endl;
      return finish(operation, buffer, true, seed);
    }
    std::string line;
    std::getline(std::cin, line);
    auto remote = RdmaMetadata::from_json(line);
    if (kind == "read") {
      auto operation = connector.begin_read(remote, descriptors);
      std::cout << "begun" << std::endl;
      return finish(operation, buffer, true, seed);
    }
    test_support::fill_pattern(buffer, seed);
    auto operation = connector.begin_write(descriptors, remote);
    std::cout << "begun" << std::endl;
    return finish(operation, buffer, false, seed);
  } catch (const Error& error) {
    std::cout << "error " << error.what() << std::endl;
    return 1;
  }
}
