// A prefill and a decode worker streaming a KV cache layer by layer over pools. Decode
// registers its KV pool once and hands out the pool's metadata (here on stdout; a sideband
// carries it between hosts); prefill computes each layer and writes its K and V blocks into
// decode's pool at once, tagged with the layer; decode computes layer i as soon as layer i is
// there, while later layers are still being computed and sent.
//
//   memwire-kv-layers decode [LAYERS] | memwire-kv-layers prefill
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kBlockBytes = 16 << 10;
constexpr std::uint64_t kBlocksPerLayer = 16;  // for K, and as many for V
constexpr auto kComputePerLayer = 2ms;         // what a GPU would spend on a layer

// The KV cache: one region for K and one for V, each with kBlocksPerLayer blocks per layer.
struct KvCache {
  explicit KvCache(std::uint32_t layers)
      : layers(layers), k(layers * kBlocksPerLayer * kBlockBytes), v(k.size()) {}
  std::vector<memwire::BlockRegion> regions() {
    const auto count = layers * kBlocksPerLayer;
    return {{k.data(), kBlockBytes, 0, count, {}}, {v.data(), kBlockBytes, 0, count, {}}};
  }
  // Layer i's blocks, K then V, as indexes of the pool (V's region follows K's).
  std::vector<std::uint64_t> blocks(std::uint32_t layer) const {
    std::vector<std::uint64_t> out;
    for (std::uint64_t b = 0; b < kBlocksPerLayer; ++b) out.push_back(layer * kBlocksPerLayer + b);
    for (std::uint64_t b = 0; b < kBlocksPerLayer; ++b)
      out.push_back(layers * kBlocksPerLayer + layer * kBlocksPerLayer + b);
    return out;
  }
  std::uint32_t layers;
  std::vector<std::uint8_t> k, v;
};

std::uint8_t value_of(std::uint32_t layer) { return static_cast<std::uint8_t>(layer * 7 + 1); }

// Decode keeps its pool up until prefill, at the pipe's other end, is done with it: the last
// tag reaches decode before prefill's write has its answer, and an owner gone at once would
// leave that write failing with PeerLost. (A serving worker stays up anyway.) POLLERR comes
// when the pipe's read end closes, that is when prefill exits.
void wait_for_prefill_to_finish() {
  struct stat out {};
  if (::fstat(STDOUT_FILENO, &out) != 0 || !S_ISFIFO(out.st_mode)) return;
  pollfd end{STDOUT_FILENO, 0, 0};
  ::poll(&end, 1, 30'000);
}

int decode(std::uint32_t layers) {
  memwire::Connector connector(memwire::ConnectorOptions::from_environment());
  KvCache cache(layers);
  memwire::PoolOptions options;
  options.name = "kv";
  auto pool = connector.register_pool(cache.regions(), options);
  std::cout << pool.metadata().to_json() << std::endl;  // once, for prefill
  std::cerr << "decode: KV pool of " << pool.block_count() << " blocks registered as "
            << connector.name() << "\n";
  memwire::LayerReceiver receive(pool, "request-1");
  Clock::time_point first;
  for (std::uint32_t layer = 0; layer < layers; ++layer) {
    receive.wait(layer, 60s);
    if (layer == 0) first = Clock::now();
    for (auto block : cache.blocks(layer)) {
      const auto* bytes = static_cast<const std::uint8_t*>(pool.block(block));
      if (bytes[0] != value_of(layer) || bytes[kBlockBytes - 1] != value_of(layer)) {
        std::cerr << "decode: layer " << layer << " holds the wrong bytes\n";
        return 1;
      }
    }
    std::this_thread::sleep_for(kComputePerLayer);  // decode's layer, on its KV blocks
  }
  std::cerr << "decode: " << layers << " layers received and checked; decoding ran "
            << std::chrono::duration<double, std::milli>(Clock::now() - first).count()
            << " ms after layer 0 arrived\n";
  wait_for_prefill_to_finish();
  return 0;
}

int prefill() {
  std::string line;
  if (!std::getline(std::cin, line)) {
    std::cerr << "prefill: no pool metadata on stdin\n";
    return 1;
  }
  const auto remote = memwire::PoolMetadata::from_json(line);
  const auto layers = static_cast<std::uint32_t>(remote.block_count() / (2 * kBlocksPerLayer));
  memwire::Connector connector(memwire::ConnectorOptions::from_environment());
  KvCache cache(layers);
  auto pool = connector.register_pool(cache.regions());
  memwire::LayerSender send(connector, pool, remote, "request-1");
  const auto start = Clock::now();
  for (std::uint32_t layer = 0; layer < layers; ++layer) {
    std::this_thread::sleep_for(kComputePerLayer);  // prefill's layer...
    std::vector<memwire::BlockPair> pairs;
    for (auto block : cache.blocks(layer)) {
      auto* bytes = static_cast<std::uint8_t*>(pool.block(block));
      std::fill(bytes, bytes + kBlockBytes, value_of(layer));  // ...its K and V
      pairs.push_back({block, block});
    }
    send.send(layer, pairs);  // on its way while the next layer computes
  }
  send.finish(60s);
  std::cerr << "prefill: " << layers << " layers ("
            << layers * 2 * kBlocksPerLayer * kBlockBytes / 1024
            << " KiB) computed and streamed in "
            << std::chrono::duration<double, std::milli>(Clock::now() - start).count() << " ms to "
            << remote.endpoint().connector << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  try {
    if (role == "decode") return decode(argc > 2 ? std::stoul(argv[2]) : 32);
    if (role == "prefill") return prefill();
  } catch (const std::exception& error) {
    std::cerr << role << ": " << error.what() << "\n";
    return 1;
  }
  std::cerr << "usage: memwire-kv-layers decode [LAYERS] | memwire-kv-layers prefill\n";
  return 2;
}
