#pragma once

// transfer_bench's command line (see the usage at the top of transfer_bench.cpp).
#include <cstddef>
#include <string>
#include <vector>

namespace memwire::bench {

struct Args {
  std::string mode;
  std::string transport = "tcp";
  std::string peer;
  std::vector<std::string> ops = {"read", "write"};
  std::vector<std::size_t> sizes;
  std::vector<unsigned> descs = {1, 16};
  std::vector<unsigned> concurrency = {1, 64};
  // Buffers per configuration, at least CONC: c=1 over 64 buffers touches as much memory as
  // c=64, so comparing the two shows what concurrency itself costs, apart from the caches.
  unsigned slots = 1;
  // Descriptors GAP x their size apart (1: contiguous): a KV cache's blocks, scattered.
  unsigned gap = 1;
  int trials = 5;
  int large_trials = 3;
  std::size_t max_inflight = 1ull << 30;
  std::size_t target_bytes = 256ull << 20;
  std::size_t max_ops = 2048;
  std::size_t samples = 3000;
  std::size_t warmup = 300;
  std::string memory = "plain";  // the peer's buffers: plain pages or a SharedBuffer
  std::vector<unsigned> owners = {1, 8, 32, 64};  // fanin: owner processes
};

// Throws std::runtime_error for a bad command line.
Args parse_transfer_bench_args(int argc, char** argv);

}  // namespace memwire::bench
