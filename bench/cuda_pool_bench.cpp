// Pools in GPU memory between two OS processes of one host (issue 33's targets): a forked
// child owns the pools (GPU and host), this process is the peer that moves blocks. Fork comes
// before either process touches CUDA. Pool metadata crosses a pipe once.
//
//   cuda_pool_bench [--trials 7]
//
// Rows (medians of `trials` after a warm-up; GB/s of the bytes moved; each row's blocks are
// checked after its last trial by reading them back):
// - shm, 256 MiB gpu->gpu, one block (CUDA IPC: the owner copies device to device), write and
//   read, against cuMemcpyDtoD of 256 MiB in one process;
// - shm, 128 random 64 KiB GPU blocks, against 128 consecutive ones (one 8 MiB IPC copy);
// - tcp, the same two patterns GPU pool -> GPU pool (staged through pinned host memory on both
//   sides) against host pool -> host pool, in the same run;
// - shm, one-shot 256 MiB gpu->gpu (CUDA IPC): the owner creates a readable (or writable) over
//   its GPU memory for each trial, the peer reads (writes) it from GPU memory; timed from the
//   metadata's arrival to the peer's completion.
// The last line is everything as JSON.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "memwire/memwire.hpp"

namespace {

using namespace memwire;
using namespace std::chrono_literals;
using memwire::detail::CudaDriver;
using nlohmann::json;

constexpr std::uint64_t kBig = 256ull << 20;
constexpr std::uint64_t kBlock = 64 << 10;
constexpr std::uint64_t kBlocks = 1024;  // 64 MiB of 64 KiB blocks
constexpr std::uint64_t kMoved = 128;

ConnectorOptions over(std::vector<std::string> transports) {
  ConnectorOptions options;
  options.transports = std::move(transports);
  return options;
}

const CudaDriver& driver() {
  const auto* found = CudaDriver::get();
  if (found == nullptr) {
    std::printf("no GPU: %s\n", CudaDriver::unavailable_reason().c_str());
    std::exit(2);
  }
  found->use_device(0);
  return *found;
}

// The owner: a GPU pool of one 256 MiB block, a GPU pool of 64 KiB blocks, and the same two
// in host memory; metadata out on `out`, then it waits for "quit" on `in`.
int run_owner(int in, int out) {
  const auto& cuda = driver();
  Connector owner(over({"shm", "tcp"}));
  auto* big = cuda.allocate_device(kBig);
  auto* small = cuda.allocate_device(kBlocks * kBlock);
  std::vector<std::byte> big_host(kBig), small_host(kBlocks * kBlock);
  auto gpu_big = owner.register_pool({{big, kBig, 0, 1, Device::parse("cuda:0")}});
  auto gpu_small = owner.register_pool({{small, kBlock, 0, kBlocks, Device::parse("cuda:0")}});
  auto host_big = owner.register_pool({{big_host.data(), kBig, 0, 1, {}}});
  auto host_small = owner.register_pool({{small_host.data(), kBlock, 0, kBlocks, {}}});
  std::string lines;
  for (const auto* pool : {&gpu_big, &gpu_small, &host_big, &host_small})
    lines += pool->metadata().to_json() + "\n";
  if (::write(out, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) return 1;
  // One-shot operations on request: "r" a readable, "w" a writable over `big`, each line of
  // metadata answered; "q" ends.
  char command = 0;
  while (::read(in, &command, 1) == 1 && command != 'q') {
    const Descriptor memory(big, kBig, Device::parse("cuda:0"));
    auto serve = [&](auto operation) {
      const auto line = operation.metadata().to_json() + "\n";
      if (::write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
      operation.wait_for_completion(60s);
      return true;
    };
    if (!(command == 'r' ? serve(owner.create_readable({memory}))
                         : serve(owner.create_writable({memory}))))
      return 1;
  }
  cuda.free_device(big);
  cuda.free_device(small);
  return 0;
}

double seconds_of(const std::function<void()>& action) {
  const auto start = std::chrono::steady_clock::now();
  action();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median_gbps(std::uint64_t bytes, int trials, const std::function<void()>& action) {
  action();  // warm-up: connections, IPC opens, pinned buffers
  std::vector<double> rates;
  for (int i = 0; i < trials; ++i) rates.push_back(bytes / seconds_of(action) / 1e9);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

std::vector<BlockPair> pairs_of(bool random) {
  std::vector<std::uint64_t> remote(kBlocks), local(kBlocks);
  for (std::uint64_t i = 0; i < kBlocks; ++i) remote[i] = local[i] = i;
  if (random) {
    std::mt19937_64 generator(7);
    std::shuffle(remote.begin(), remote.end(), generator);
    std::shuffle(local.begin(), local.end(), generator);
  }
  std::vector<BlockPair> pairs;
  for (std::uint64_t i = 0; i < kMoved; ++i) pairs.push_back({remote[i], local[i]});
  return pairs;
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 7;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--trials") trials = std::stoi(argv[i + 1]);
  int to_owner[2], from_owner[2];
  if (::pipe(to_owner) != 0 || ::pipe(from_owner) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(to_owner[1]);
    ::close(from_owner[0]);
    ::_exit(run_owner(to_owner[0], from_owner[1]));
  }
  ::close(to_owner[0]);
  ::close(from_owner[1]);
  std::string text;
  char chunk[65536];
  while (std::count(text.begin(), text.end(), '\n') < 4) {
    const auto got = ::read(from_owner[0], chunk, sizeof chunk);
    if (got <= 0) {
      std::printf("the owner process ended early\n");
      return 1;
    }
    text.append(chunk, static_cast<std::size_t>(got));
  }
  std::vector<PoolMetadata> remote;
  for (std::size_t start = 0; remote.size() < 4;) {
    const auto end = text.find('\n', start);
    remote.push_back(PoolMetadata::from_json(text.substr(start, end - start)));
    start = end + 1;
  }
  const auto& cuda = driver();
  auto* big = cuda.allocate_device(kBig);
  auto* small = cuda.allocate_device(kBlocks * kBlock);
  auto* check = cuda.allocate_device(kBlocks * kBlock);
  std::vector<std::byte> pattern(kBlocks * kBlock);
  std::mt19937_64 generator(11);
  for (auto& byte : pattern) byte = static_cast<std::byte>(generator());
  cuda.copy_to_device(small, pattern.data(), pattern.size());
  std::vector<std::byte> big_host(kBig), small_host(pattern);
  json report;
  int failures = 0;
  auto row = [&](const std::string& name, double gbps) {
    report[name] = gbps;
    std::printf("%-44s %8.2f GB/s\n", name.c_str(), gbps);
    std::fflush(stdout);
  };
  // Moves `pairs` from `local` to pool `to` and back into `back` (same geometry), then checks.
  auto verified = [&](Connector& peer, const Pool& local, const Pool& back, const PoolMetadata& to,
                      const std::vector<BlockPair>& pairs, const std::string& name) {
    peer.write_blocks(local, pairs, to).wait_for_completion(60s);
    peer.read_blocks(to, pairs, back).wait_for_completion(60s);
    for (const auto& pair : pairs) {
      const auto* a = static_cast<std::byte*>(local.block(pair.local));
      const auto* b = static_cast<std::byte*>(back.block(pair.local));
      std::vector<std::byte> x(kBlock), y(kBlock);
      cuda.copy_to_host(x.data(), a, kBlock);
      cuda.copy_to_host(y.data(), b, kBlock);  // plain host memory copies too (UVA)
      if (x != y) {
        std::printf("MISMATCH %s: block %llu\n", name.c_str(),
                    static_cast<unsigned long long>(pair.local));
        ++failures;
        return;
      }
    }
    std::printf("%-44s verified\n", name.c_str());
  };
  void* scratch = cuda.allocate_device(kBig);
  row("in-process cuMemcpyDtoD 256 MiB",
      median_gbps(kBig, trials, [&] { cuda.copy_device_to_device(scratch, big, kBig); }));
  row("in-process cuMemcpyDtoD 8 MiB", median_gbps(kMoved * kBlock, trials, [&] {
        cuda.copy_device_to_device(scratch, small, kMoved * kBlock);
      }));
  cuda.free_device(scratch);
  for (const std::string transport : {"shm", "tcp"}) {
    Connector peer(over({transport}));
    auto gpu_big = peer.register_pool({{big, kBig, 0, 1, Device::parse("cuda:0")}});
    auto gpu_small = peer.register_pool({{small, kBlock, 0, kBlocks, Device::parse("cuda:0")}});
    auto gpu_check = peer.register_pool({{check, kBlock, 0, kBlocks, Device::parse("cuda:0")}});
    auto host_big = peer.register_pool({{big_host.data(), kBig, 0, 1, {}}});
    auto host_small = peer.register_pool({{small_host.data(), kBlock, 0, kBlocks, {}}});
    const auto prefix = transport + " ";
    row(prefix + "gpu->gpu write 256 MiB", median_gbps(kBig, trials, [&] {
          peer.write_blocks(gpu_big, {{0, 0}}, remote[0]).wait_for_completion(60s);
        }));
    row(prefix + "gpu<-gpu read 256 MiB", median_gbps(kBig, trials, [&] {
          peer.read_blocks(remote[0], {{0, 0}}, gpu_big).wait_for_completion(60s);
        }));
    if (transport == "tcp") {
      row(prefix + "host->host write 256 MiB", median_gbps(kBig, trials, [&] {
            peer.write_blocks(host_big, {{0, 0}}, remote[2]).wait_for_completion(60s);
          }));
      row(prefix + "host<-host read 256 MiB", median_gbps(kBig, trials, [&] {
            peer.read_blocks(remote[2], {{0, 0}}, host_big).wait_for_completion(60s);
          }));
    }
    for (const bool random : {true, false}) {
      const auto pairs = pairs_of(random);
      const auto what = std::string(random ? "128 random" : "128 consecutive") + " x 64 KiB";
      row(prefix + "gpu->gpu write " + what, median_gbps(kMoved * kBlock, trials, [&] {
            peer.write_blocks(gpu_small, pairs, remote[1], "t").wait_for_completion(60s);
          }));
      row(prefix + "gpu<-gpu read " + what, median_gbps(kMoved * kBlock, trials, [&] {
            peer.read_blocks(remote[1], pairs, gpu_small).wait_for_completion(60s);
          }));
      if (transport == "tcp") {
        row(prefix + "host->host write " + what, median_gbps(kMoved * kBlock, trials, [&] {
              peer.write_blocks(host_small, pairs, remote[3], "t").wait_for_completion(60s);
            }));
        row(prefix + "host<-host read " + what, median_gbps(kMoved * kBlock, trials, [&] {
              peer.read_blocks(remote[3], pairs, host_small).wait_for_completion(60s);
            }));
      }
      verified(peer, gpu_small, gpu_check, remote[1], pairs, prefix + "gpu blocks " + what);
    }
  }
  {
    // One-shot, 256 MiB, GPU memory at both ends of one host (CUDA IPC).
    Connector peer(over({"shm"}));
    std::string pending;
    auto one_shot = [&](char command) {
      if (::write(to_owner[1], &command, 1) != 1) std::exit(1);
      while (pending.find('\n') == std::string::npos) {
        const auto got = ::read(from_owner[0], chunk, sizeof chunk);
        if (got <= 0) std::exit(1);
        pending.append(chunk, static_cast<std::size_t>(got));
      }
      const auto end = pending.find('\n');
      const auto metadata = RdmaMetadata::from_json(pending.substr(0, end));
      pending.erase(0, end + 1);
      return metadata;
    };
    const Descriptor local(big, kBig, Device::parse("cuda:0"));
    auto timed = [&](char command) {
      std::vector<double> rates;
      for (int i = 0; i <= trials; ++i) {
        const auto metadata = one_shot(command);
        const auto seconds = seconds_of([&] {
          if (command == 'r')
            peer.begin_read(metadata, {local}).wait_for_completion(60s);
          else
            peer.begin_write({local}, metadata).wait_for_completion(60s);
        });
        if (i > 0) rates.push_back(kBig / seconds / 1e9);  // the first is the warm-up
      }
      std::sort(rates.begin(), rates.end());
      return rates[rates.size() / 2];
    };
    row("shm one-shot gpu<-gpu read 256 MiB", timed('r'));
    row("shm one-shot gpu->gpu write 256 MiB", timed('w'));
  }
  (void)::write(to_owner[1], "q", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  report["failures"] = failures;
  std::printf("%s\n", report.dump().c_str());
  return failures == 0 ? 0 : 1;
}
