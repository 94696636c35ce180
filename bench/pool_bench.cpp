// Pools between two OS processes, the way a KV-cache engine uses them: this driver plays
// prefill (it writes and reads blocks), a forked child plays decode (the pool's owner, which
// awaits tags). Pool metadata crosses a pipe once, as a sideband would carry it.
//
//   pool_bench --transport tcp|shm [--samples 2000] [--rounds 20] [--layers 64]
//              [--only metadata|scattered|sliced|tagged|layers] [--memory plain|shared]
//
// --memory shared: both pools are a SharedBuffer each (over shm the peer then copies the
// owner's blocks through its own mapping); plain (the default): ordinary memory.
//
// Figures (medians; the last line is everything as JSON):
// - metadata: an 80 x 2 x 2,000-block pool's JSON size, and made + parsed against a
//   one-descriptor RdmaMetadata made + parsed;
// - scattered: 128 random 16 KiB blocks READ and WRITE against 128 consecutive ones (one 2 MiB
//   run);
// - sliced: TP 2 -> 1, 128 random 8 KiB halves of 16 KiB blocks READ and WRITE (a BlockSlice)
//   against the same pairs unsliced (8 KiB whole blocks) and 128 random whole 16 KiB blocks;
// - tagged: one 4 KiB block WRITE with a tag, begun to completed (the owner had the tag by
//   then: its acknowledgement answers the tag), p50; bench/run divides it by a raw 64 B -> 4 KiB
//   request/reply of the same run;
// - layers: 64 layers x 2 x 16 blocks x 16 KiB, compute of 0.5 and 2 ms per layer simulated on
//   both sides: prefill computes layer i, then writes it with tag i; decode awaits tag i, then
//   computes layer i. End to end (prefill's start to decode's last tag) against its bound,
//   max(compute, one bulk write) + one layer's write; what write_blocks cost prefill's thread
//   per layer (time it did not compute); time to first layer usable (prefill's layer 0
//   computed to decode holding tag 0); against one bulk write after all compute, and against
//   one operation per layer (a fresh writable per layer, its metadata, begin_write: how it was
//   done before pools).
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "memwire/memwire.hpp"

namespace {

using namespace memwire;
using namespace memwire::bench;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr std::uint64_t kBlock = 16384;
constexpr std::uint64_t kBlocks = 2048;            // 32 MiB: 64 layers x 2 x 16 blocks
constexpr std::uint64_t kBlocksPerLayer = 2 * 16;  // K and V
// A second region of 4 KiB blocks, for the tagged small-block figure: blocks kBlocks and up.
constexpr std::uint64_t kSmall = 4096;
constexpr std::uint64_t kSmallBlocks = 256;

// A third of 8 KiB blocks, for the sliced figure: a TP 2 rank's half of a 16 KiB block, blocks
// kBlocks + kSmallBlocks and up.
constexpr std::uint64_t kHalf = kBlock / 2;
constexpr std::uint64_t kHalfBlocks = 4096;  // 32 MiB, as the 16 KiB blocks: alike in cache
constexpr std::uint64_t kFirstHalf = kBlocks + kSmallBlocks;

constexpr std::size_t kPoolBytes = kBlocks * kBlock + kSmallBlocks * kSmall + kHalfBlocks * kHalf;

// A pool's bytes: ordinary memory, or a SharedBuffer.
class PoolBytes {
 public:
  explicit PoolBytes(bool shared) {
    if (shared) {
      shared_.emplace(kPoolBytes);
    } else {
      plain_.resize(kPoolBytes);
    }
  }
  std::byte* data() { return shared_ ? shared_->data() : plain_.data(); }

 private:
  std::vector<std::byte> plain_;
  std::optional<SharedBuffer> shared_;
};

std::vector<BlockRegion> pool_regions(PoolBytes& memory) {
  auto* base = memory.data();
  return {{base, kBlock, 0, kBlocks, {}},
          {base + kBlocks * kBlock, kSmall, 0, kSmallBlocks, {}},
          {base + kBlocks * kBlock + kSmallBlocks * kSmall, kHalf, 0, kHalfBlocks, {}}};
}

double now_seconds() {
  timespec spec{};
  ::clock_gettime(CLOCK_MONOTONIC, &spec);  // one clock for both processes
  return static_cast<double>(spec.tv_sec) + static_cast<double>(spec.tv_nsec) * 1e-9;
}

// Simulated compute: a GPU's, so the CPU thread waits (a busy CPU here would take the core
// the transports need: this machine has two).
void compute(double seconds) {
  timespec until{};
  ::clock_gettime(CLOCK_MONOTONIC, &until);
  const auto nanoseconds = until.tv_nsec + static_cast<long>(seconds * 1e9);
  until.tv_sec += nanoseconds / 1000000000;
  until.tv_nsec = nanoseconds % 1000000000;
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

// Length-prefixed messages over a pipe.
void put(int fd, const std::string& text) {
  const std::uint64_t size = text.size();
  if (::write(fd, &size, sizeof size) != sizeof size ||
      ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    throw std::runtime_error("pipe write failed");
}

std::string get(int fd) {
  std::uint64_t size = 0;
  auto read_all = [&](void* into, std::size_t length) {
    auto* at = static_cast<char*>(into);
    while (length > 0) {
      const auto got = ::read(fd, at, length);
      if (got <= 0) throw std::runtime_error("pipe closed");
      at += got;
      length -= static_cast<std::size_t>(got);
    }
  };
  read_all(&size, sizeof size);
  std::string text(size, '\0');
  read_all(text.data(), size);
  return text;
}

ConnectorOptions options_for(const std::string& transport) {
  ConnectorOptions options;
  options.transports = {transport};
  return options;
}

std::vector<BlockPair> layer_pairs(unsigned layer) {
  std::vector<BlockPair> pairs;
  for (std::uint64_t b = 0; b < kBlocksPerLayer; ++b)
    pairs.push_back({layer * kBlocksPerLayer + b, layer * kBlocksPerLayer + b});
  return pairs;
}

// The decode side: owns a pool, answers commands until told to quit.
int decode(const std::string& transport, bool shared, int commands, int answers) {
  Connector connector(options_for(transport));
  PoolBytes memory(shared);
  auto pool = connector.register_pool(pool_regions(memory));
  put(answers, pool.metadata().to_json());
  for (;;) {
    const auto command = json::parse(get(commands));
    const std::string what = command["do"];
    if (what == "quit") return 0;
    const unsigned layers = command["layers"];
    const double seconds = command["compute"];
    json arrivals = json::array();
    if (what == "layers") {
      // Tags are timed where they are delivered (memwire's I/O thread), so that decode's own
      // compute between them does not count as their arrival.
      std::mutex mutex;
      std::condition_variable delivered;
      std::vector<double> at(layers, 0.0);
      pool.on_notification([&](const Notification& notification) {
        const auto when = now_seconds();
        std::lock_guard lock(mutex);
        at[std::stoul(notification.tag.substr(1))] = when;
        delivered.notify_all();
      });
      for (unsigned i = 0; i < layers; ++i) {
        std::unique_lock lock(mutex);
        delivered.wait(lock, [&] { return at[i] != 0.0; });
        lock.unlock();
        compute(seconds);  // decode's layer i, once its KV blocks are here
      }
      pool.on_notification(nullptr);
      for (auto when : at) arrivals.push_back(when);
    } else if (what == "per_layer") {
      // One writable per layer, as before pools: its metadata to prefill, then await it.
      std::vector<WritableOperation> writables;
      json metadata = json::array();
      for (unsigned i = 0; i < layers; ++i) {
        std::vector<Descriptor> blocks;
        for (const auto& pair : layer_pairs(i))
          blocks.emplace_back(memory.data() + pair.remote * kBlock, kBlock);
        writables.push_back(connector.create_writable(std::move(blocks)));
        metadata.push_back(writables.back().metadata().to_json());
      }
      put(answers, metadata.dump());
      for (unsigned i = 0; i < layers; ++i) {
        writables[i].wait_for_completion(60s);
        arrivals.push_back(now_seconds());
        compute(seconds);
      }
    } else if (what == "drain") {
      while (pool.queued_notifications() > 0) (void)pool.next_notification(1s);
    }
    put(answers, json{{"arrivals", arrivals}, {"end", now_seconds()}}.dump());
  }
}

struct Prefill {
  Connector& connector;
  Pool& pool;
  PoolMetadata remote;
  PoolBytes& memory;
};

// From begin to completed.
template <class Begin>
double timed_transfer(Begin begin) {
  const auto start = now_seconds();
  auto transfer = begin();
  transfer.wait_for_completion(60s);
  return now_seconds() - start;
}

json metadata_figures(unsigned rounds) {
  std::vector<RemoteRegion> regions;
  for (std::uint64_t r = 0; r < 160; ++r)
    regions.push_back({Device{}, 0x7f0000000000ull + r * 2000 * kBlock, kBlock, kBlock, 2000});
  const Endpoint endpoint{"prefill-0", "host", {{"tcp", "10.0.0.1:4711", {}, {}}}};
  const std::string id(32, 'a');
  std::vector<double> pool_times, one_times;
  std::size_t pool_bytes = 0, one_bytes = 0;
  for (unsigned n = 0; n < rounds * 50; ++n) {
    auto start = now_seconds();
    const auto text = PoolMetadata({.name = "kv",
                                    .generation = 1,
                                    .regions = regions,
                                    .key = id,
                                    .endpoint = endpoint,
                                    .token = id})
                          .to_json();
    (void)PoolMetadata::from_json(text);
    pool_times.push_back(now_seconds() - start);
    pool_bytes = text.size();
    start = now_seconds();
    const auto one = RdmaMetadata({.kind = OperationKind::Read,
                                   .descriptors = {{Device{}, 0x7f0000000000ull, kBlock}},
                                   .notification_key = id,
                                   .endpoint = endpoint,
                                   .token = id,
                                   .expires_at_ms = 0})
                         .to_json();
    (void)RdmaMetadata::from_json(one);
    one_times.push_back(now_seconds() - start);
    one_bytes = one.size();
  }
  const auto pool = summarize(pool_times).median, single = summarize(one_times).median;
  std::printf(
      "metadata: 320,000-block pool %zu bytes, made+parsed %.1f us; one descriptor %zu "
      "bytes, %.1f us (%.2fx)\n",
      pool_bytes, pool * 1e6, one_bytes, single * 1e6, pool / single);
  return {{"pool_bytes", pool_bytes},
          {"pool_us", pool * 1e6},
          {"one_descriptor_bytes", one_bytes},
          {"one_descriptor_us", single * 1e6}};
}

json scattered_figures(Prefill& prefill, unsigned rounds) {
  std::mt19937_64 random(42);
  json out;
  for (const char* op : {"read", "write"}) {
    std::vector<double> scattered, contiguous;
    for (unsigned round = 0; round < rounds; ++round) {
      std::vector<std::uint64_t> remote(kBlocks), local(kBlocks);
      for (std::uint64_t b = 0; b < kBlocks; ++b) remote[b] = local[b] = b;
      std::shuffle(remote.begin(), remote.end(), random);
      std::shuffle(local.begin(), local.end(), random);
      std::vector<BlockPair> random_pairs, run_pairs;
      const std::uint64_t first = random() % (kBlocks - 128);
      for (std::uint64_t b = 0; b < 128; ++b) {
        random_pairs.push_back({remote[b], local[b]});
        run_pairs.push_back({first + b, first + b});
      }
      auto move = [&](const std::vector<BlockPair>& pairs) {
        return [&, pairs] {
          return std::string(op) == "read"
                     ? prefill.connector.read_blocks(prefill.remote, pairs, prefill.pool)
                     : prefill.connector.write_blocks(prefill.pool, pairs, prefill.remote);
        };
      };
      // Alternating, so that neither gets the quieter moments.
      scattered.push_back(timed_transfer(move(random_pairs)));
      contiguous.push_back(timed_transfer(move(run_pairs)));
    }
    const auto s = summarize(scattered).median, c = summarize(contiguous).median;
    const double gbps_s = 128.0 * kBlock / s / 1e9, gbps_c = 128.0 * kBlock / c / 1e9;
    std::printf("128 x 16 KiB %s: random %.2f GB/s, one 2 MiB run %.2f GB/s (%.2fx)\n", op, gbps_s,
                gbps_c, gbps_s / gbps_c);
    out[op] = {{"random_gbps", gbps_s}, {"contiguous_gbps", gbps_c}, {"ratio", gbps_s / gbps_c}};
  }
  return out;
}

// TP 2 -> 1: 128 random pairs of a TP 2 rank's 8 KiB blocks and halves of a TP 1 rank's 16 KiB
// blocks (rank 1's: the second half). Decode (TP 1) reads them; prefill (a TP 2 rank) writes
// them. Against the same 128 random pairs unsliced, 8 KiB whole blocks both sides (the same
// bytes, the same number of pieces: what slicing itself costs), and against 128 random whole
// 16 KiB blocks (the scattered figure's), in alternating rounds. GB/s of the bytes moved.
json sliced_figures(Prefill& prefill, unsigned rounds) {
  std::mt19937_64 random(7);
  json out;
  for (const char* op : {"read", "write"}) {
    const bool reading = std::string(op) == "read";
    std::vector<double> sliced, unsliced, whole;
    for (unsigned round = 0; round < rounds; ++round) {
      std::vector<std::uint64_t> large(kBlocks), half(kHalfBlocks), other_half(kHalfBlocks),
          other_large(kBlocks);
      for (std::uint64_t b = 0; b < kBlocks; ++b) large[b] = other_large[b] = b;
      for (std::uint64_t b = 0; b < kHalfBlocks; ++b) half[b] = other_half[b] = kFirstHalf + b;
      for (auto* order : {&large, &half, &other_half, &other_large})
        std::shuffle(order->begin(), order->end(), random);
      std::vector<BlockPair> sliced_pairs, half_pairs, whole_pairs;
      for (std::uint64_t b = 0; b < 128; ++b) {
        // Reading, the remote block is the TP 2 rank's; writing, the local one.
        sliced_pairs.push_back(reading ? BlockPair{half[b], large[b]}
                                       : BlockPair{large[b], half[b]});
        half_pairs.push_back({half[b], other_half[b]});
        whole_pairs.push_back({large[b], other_large[b]});
      }
      const BlockSlice rank1 = reading ? BlockSlice{.local_offset = kHalf, .length = kHalf}
                                       : BlockSlice{.remote_offset = kHalf, .length = kHalf};
      auto move = [&](const std::vector<BlockPair>& pairs, std::optional<BlockSlice> slice) {
        return [&, pairs, slice] {
          if (slice)
            return reading
                       ? prefill.connector.read_blocks(prefill.remote, pairs, prefill.pool, *slice)
                       : prefill.connector.write_blocks(prefill.pool, pairs, prefill.remote,
                                                        *slice);
          return reading ? prefill.connector.read_blocks(prefill.remote, pairs, prefill.pool)
                         : prefill.connector.write_blocks(prefill.pool, pairs, prefill.remote);
        };
      };
      sliced.push_back(timed_transfer(move(sliced_pairs, rank1)));
      unsliced.push_back(timed_transfer(move(half_pairs, std::nullopt)));
      whole.push_back(timed_transfer(move(whole_pairs, std::nullopt)));
    }
    const double gbps_sliced = 128.0 * kHalf / summarize(sliced).median / 1e9;
    const double gbps_unsliced = 128.0 * kHalf / summarize(unsliced).median / 1e9;
    const double gbps_whole = 128.0 * kBlock / summarize(whole).median / 1e9;
    std::printf(
        "TP 2 -> 1, 128 random 8 KiB halves of 16 KiB blocks %s: %.2f GB/s; unsliced 128 x 8 KiB "
        "%.2f GB/s (%.2fx); 128 x 16 KiB whole blocks %.2f GB/s (%.2fx)\n",
        op, gbps_sliced, gbps_unsliced, gbps_sliced / gbps_unsliced, gbps_whole,
        gbps_sliced / gbps_whole);
    out[op] = {{"sliced_gbps", gbps_sliced},
               {"unsliced_gbps", gbps_unsliced},
               {"ratio", gbps_sliced / gbps_unsliced},
               {"whole_block_gbps", gbps_whole},
               {"ratio_to_whole_blocks", gbps_sliced / gbps_whole}};
  }
  return out;
}

json tagged_figures(Prefill& prefill, unsigned samples, int commands, int answers) {
  std::vector<double> tagged, untagged_read;
  for (unsigned n = 0; n < samples + samples / 10; ++n) {
    const bool warm = n >= samples / 10;
    const std::uint64_t block = kBlocks + n % kSmallBlocks;
    const auto t = timed_transfer([&] {
      return prefill.connector.write_blocks(prefill.pool, {{block, block}}, prefill.remote, "t");
    });
    const auto r = timed_transfer([&] {
      return prefill.connector.read_blocks(prefill.remote, {{block, block}}, prefill.pool);
    });
    if (warm) tagged.push_back(t), untagged_read.push_back(r);
  }
  put(commands, json{{"do", "drain"}, {"layers", 0}, {"compute", 0}}.dump());
  (void)get(answers);
  const auto summary = summarize(tagged), read = summarize(untagged_read);
  std::printf(
      "one 4 KiB block with a tag, write to acknowledged tag: p50 %.1f us, p99 %.1f us; "
      "untagged 4 KiB block read p50 %.1f us\n",
      summary.median * 1e6, summary.p99 * 1e6, read.median * 1e6);
  return {{"block_bytes", kSmall},
          {"p50_us", summary.median * 1e6},
          {"p99_us", summary.p99 * 1e6},
          {"read_p50_us", read.median * 1e6}};
}

json layer_figures(Prefill& prefill, unsigned layers, unsigned rounds, int commands, int answers) {
  json out = json::array();
  // What one layer and the whole cache cost to move, alone.
  std::vector<double> one_layer, bulk;
  std::vector<BlockPair> all;
  for (unsigned i = 0; i < layers; ++i)
    for (const auto& pair : layer_pairs(i)) all.push_back(pair);
  for (unsigned round = 0; round < rounds; ++round) {
    one_layer.push_back(timed_transfer([&] {
      return prefill.connector.write_blocks(prefill.pool, layer_pairs(round % layers),
                                            prefill.remote);
    }));
    bulk.push_back(timed_transfer(
        [&] { return prefill.connector.write_blocks(prefill.pool, all, prefill.remote); }));
  }
  const double layer_s = summarize(one_layer).median, bulk_s = summarize(bulk).median;
  std::printf("one layer (%llu KiB): %.0f us; all %u layers in one write: %.2f ms\n",
              static_cast<unsigned long long>(kBlocksPerLayer * kBlock / 1024), layer_s * 1e6,
              layers, bulk_s * 1e3);
  for (double per_layer : {0.0005, 0.002}) {
    std::vector<double> end_to_end, first_usable, old_end_to_end, old_first_usable, compute_total;
    std::vector<double> send_per_layer;  // what write_blocks cost prefill's thread
    for (unsigned round = 0; round < std::max(1u, rounds / 4); ++round) {
      // Pools: layer i written with tag i as soon as it is computed.
      put(commands, json{{"do", "layers"}, {"layers", layers}, {"compute", per_layer}}.dump());
      const auto start = now_seconds();
      double first_done = 0, computing = 0, sending = 0;
      std::vector<BlockTransfer> writes;
      for (unsigned i = 0; i < layers; ++i) {
        const auto began = now_seconds();
        compute(per_layer);
        computing += now_seconds() - began;
        const auto computed = now_seconds();
        if (i == 0) first_done = computed;
        writes.push_back(prefill.connector.write_blocks(prefill.pool, layer_pairs(i),
                                                        prefill.remote, "L" + std::to_string(i)));
        sending += now_seconds() - computed;
      }
      for (auto& write : writes) write.wait_for_completion(60s);
      auto report = json::parse(get(answers));
      end_to_end.push_back(report["arrivals"].back().get<double>() - start);
      compute_total.push_back(computing);
      send_per_layer.push_back(sending / layers);
      first_usable.push_back(report["arrivals"][0].get<double>() - first_done);

      // One operation per layer: decode makes a writable per layer and hands out its metadata.
      put(commands, json{{"do", "per_layer"}, {"layers", layers}, {"compute", per_layer}}.dump());
      auto metadata = json::parse(get(answers));
      const auto old_start = now_seconds();
      double old_first_done = 0;
      std::vector<WriteOperation> old_writes;
      for (unsigned i = 0; i < layers; ++i) {
        compute(per_layer);
        if (i == 0) old_first_done = now_seconds();
        std::vector<Descriptor> blocks;
        for (const auto& pair : layer_pairs(i))
          blocks.emplace_back(static_cast<std::byte*>(prefill.pool.block(pair.local)), kBlock);
        old_writes.push_back(prefill.connector.begin_write(
            std::move(blocks), RdmaMetadata::from_json(metadata[i].get<std::string>())));
      }
      for (auto& write : old_writes) write.wait_for_completion(60s);
      auto old_report = json::parse(get(answers));
      old_end_to_end.push_back(old_report["arrivals"].back().get<double>() - old_start);
      old_first_usable.push_back(old_report["arrivals"][0].get<double>() - old_first_done);
    }
    // As measured: a sleep overshoots by the timer's slack, and that is compute time too.
    const double total_compute = summarize(compute_total).median;
    const double e2e = summarize(end_to_end).median, first = summarize(first_usable).median;
    const double old_e2e = summarize(old_end_to_end).median;
    const double send = summarize(send_per_layer).median;
    // Issue 35's bound: the longer of compute and the bulk transfer, then the last layer's.
    const double bound = std::max(total_compute, bulk_s) + layer_s;
    std::printf(
        "layers, %.1f ms compute each: end to end %.2f ms (bound %.2f ms: max(compute %.1f, "
        "transfer %.2f) + a layer); write_blocks on prefill's thread %.1f us a layer; first "
        "layer usable %.0f us (%.2fx a layer's transfer); bulk after compute %.2f ms; one "
        "operation per layer %.2f ms\n",
        per_layer * 1e3, e2e * 1e3, bound * 1e3, total_compute * 1e3, bulk_s * 1e3, send * 1e6,
        first * 1e6, first / layer_s, (total_compute + bulk_s) * 1e3, old_e2e * 1e3);
    out.push_back({{"compute_ms", per_layer * 1e3},
                   {"end_to_end_ms", e2e * 1e3},
                   {"bound_ms", bound * 1e3},
                   {"send_us_per_layer", send * 1e6},
                   {"first_usable_us", first * 1e6},
                   {"first_usable_layers", first / layer_s},
                   {"one_layer_us", layer_s * 1e6},
                   {"bulk_ms", bulk_s * 1e3},
                   {"bulk_after_compute_ms", (total_compute + bulk_s) * 1e3},
                   {"per_layer_operations_ms", old_e2e * 1e3},
                   {"per_layer_first_usable_us", summarize(old_first_usable).median * 1e6}});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport = "tcp";
  unsigned samples = 2000, rounds = 20, layers = 64;
  std::string only;
  bool shared = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--transport") transport = value;
    if (flag == "--samples") samples = static_cast<unsigned>(std::stoul(value));
    if (flag == "--rounds") rounds = static_cast<unsigned>(std::stoul(value));
    if (flag == "--layers") layers = std::min<unsigned>(64, std::stoul(value));
    // One figure: metadata, scattered, sliced, tagged or layers.
    if (flag == "--only") only = value;
    if (flag == "--memory") shared = value == "shared";
  }
  int to_decode[2], from_decode[2];
  if (::pipe(to_decode) != 0 || ::pipe(from_decode) != 0) return 1;
  // Forked before any connector (or thread) exists in this process.
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(to_decode[1]);
    ::close(from_decode[0]);
    try {
      ::_exit(decode(transport, shared, to_decode[0], from_decode[1]));
    } catch (const std::exception& error) {
      std::fprintf(stderr, "decode: %s\n", error.what());
      ::_exit(1);
    }
  }
  ::close(to_decode[0]);
  ::close(from_decode[1]);
  json report{{"transport", transport}, {"memory", shared ? "shared" : "plain"}};
  try {
    Connector connector(options_for(transport));
    PoolBytes memory(shared);
    auto pool = connector.register_pool(pool_regions(memory));
    Prefill prefill{connector, pool, PoolMetadata::from_json(get(from_decode[0])), memory};
    const auto registrations = connector.telemetry().registrations;
    const auto memory_regions = connector.telemetry().memory_regions;
    auto wanted = [&](const char* figure) { return only.empty() || only == figure; };
    if (wanted("metadata")) report["metadata"] = metadata_figures(rounds);
    if (wanted("scattered")) report["scattered"] = scattered_figures(prefill, rounds * 5);
    if (wanted("sliced")) report["sliced"] = sliced_figures(prefill, rounds * 5);
    if (wanted("tagged"))
      report["tagged"] = tagged_figures(prefill, samples, to_decode[1], from_decode[0]);
    if (wanted("layers"))
      report["layers"] = layer_figures(prefill, layers, rounds, to_decode[1], from_decode[0]);
    // Pool transfers register nothing; the old way's per-layer writables are the decode side's.
    report["registrations_after_first"] = connector.telemetry().registrations - registrations;
    report["memory_regions_after_first"] = connector.telemetry().memory_regions - memory_regions;
    std::printf(
        "registrations by %s transfers after the pool's: %llu\n", "pool",
        static_cast<unsigned long long>(report["registrations_after_first"].get<std::uint64_t>()));
    put(to_decode[1], json{{"do", "quit"}}.dump());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "pool_bench: %s\n", error.what());
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 1;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
