// Two processes, one pipe: the publisher hands out the metadata of a readable buffer on stdout,
// the reader takes it from stdin, reads the buffer and says how it went.
//
//   memwire-pipe-demo publish [SIZE_MIB] | memwire-pipe-demo read
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"

namespace {

// Cheap content check so the reader proves it got the publisher's bytes.
std::uint64_t checksum(const std::vector<std::uint64_t>& words) {
  return std::accumulate(words.begin(), words.end(), std::uint64_t{0},
                         [](std::uint64_t sum, std::uint64_t word) { return sum * 31 + word; });
}

int publish(std::size_t mebibytes) {
  memwire::Connector connector(memwire::ConnectorOptions::from_environment());
  std::vector<std::uint64_t> data(mebibytes * (1u << 20) / sizeof(std::uint64_t));
  std::iota(data.begin(), data.end(), std::uint64_t{1});
  auto readable = connector.create_readable({memwire::Descriptor(std::span(data))});
  std::cout << readable.metadata().to_json() << std::endl;
  std::cerr << "publisher: " << mebibytes << " MiB readable as " << connector.name()
            << " (checksum " << checksum(data) << "), waiting for a reader\n";
  readable.wait_for_completion(std::chrono::minutes(2));
  std::cerr << "publisher: read completed over " << readable.transport() << "\n";
  return 0;
}

int read() {
  std::string line;
  if (!std::getline(std::cin, line)) {
    std::cerr << "reader: no metadata on stdin\n";
    return 1;
  }
  auto remote = memwire::RdmaMetadata::from_json(line);
  memwire::Connector connector(memwire::ConnectorOptions::from_environment());
  std::vector<std::uint64_t> data(remote.total_size() / sizeof(std::uint64_t));
  auto started = std::chrono::steady_clock::now();
  auto read = connector.begin_read(remote, {memwire::Descriptor(std::span(data))});
  read.wait_for_completion(std::chrono::minutes(2));
  std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
  const double mib = static_cast<double>(remote.total_size()) / (1 << 20);
  std::cout << "reader: read " << mib << " MiB from " << remote.endpoint().connector << " over "
            << read.transport() << " in " << seconds.count() * 1000
            << " ms: " << mib / 1024 / seconds.count() << " GiB/s (checksum " << checksum(data)
            << ")" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "publish") return publish(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256);
    if (mode == "read") return read();
    std::cerr << "usage: memwire-pipe-demo publish [SIZE_MIB] | memwire-pipe-demo read\n";
    return 2;
  } catch (const memwire::Error& error) {
    std::cerr << "memwire-pipe-demo: " << error.what() << "\n";
    return 1;
  }
}
