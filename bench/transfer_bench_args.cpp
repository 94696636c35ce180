#include "transfer_bench_args.hpp"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "bench_support.hpp"

namespace memwire::bench {
namespace {
[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }
}  // namespace

Args parse_transfer_bench_args(int argc, char** argv) {
  if (argc < 2) fail("usage: transfer_bench throughput|latency --transport NAME [options]");
  Args args;
  args.mode = argv[1];
  args.sizes = parse_sizes(args.mode == "latency" ? "64,4K"
                           : args.mode == "fanin" ? "1M"
                                                  : "4K,64K,1M,16M,64M,256M,1G");
  if (args.mode == "fanin") args.samples = 30, args.warmup = 3;
  if (args.mode == "connections")
    args.sizes = parse_sizes("4K"), args.owners = {16}, args.concurrency = {64};
  args.peer = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "transfer_peer");
  auto unsigned_list = [](const std::string& text) {
    std::vector<unsigned> values;
    for (const auto& item : split(text)) values.push_back(std::stoul(item));
    return values;
  };
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--transport")
      args.transport = value;
    else if (key == "--memory")
      args.memory = value;
    else if (key == "--peer")
      args.peer = value;
    else if (key == "--ops")
      args.ops = split(value);
    else if (key == "--sizes")
      args.sizes = parse_sizes(value);
    else if (key == "--descs")
      args.descs = unsigned_list(value);
    else if (key == "--conc")
      args.concurrency = unsigned_list(value);
    else if (key == "--slots")
      args.slots = std::stoul(value);
    else if (key == "--gap")
      args.gap = std::max(1u, static_cast<unsigned>(std::stoul(value)));
    else if (key == "--trials")
      args.trials = std::stoi(value);
    else if (key == "--large-trials")
      args.large_trials = std::stoi(value);
    else if (key == "--max-inflight")
      args.max_inflight = parse_sizes(value).at(0);
    else if (key == "--target-bytes")
      args.target_bytes = parse_sizes(value).at(0);
    else if (key == "--max-ops")
      args.max_ops = std::stoul(value);
    else if (key == "--owners")
      args.owners = unsigned_list(value);
    else if (key == "--samples")
      args.samples = std::stoul(value);
    else if (key == "--warmup")
      args.warmup = std::stoul(value);
    else
      fail("unknown option " + key);
  }
  if (args.mode != "throughput" && args.mode != "latency" && args.mode != "fanin" &&
      args.mode != "connections")
    fail("mode is throughput, latency, fanin or connections");
  return args;
}

}  // namespace memwire::bench
