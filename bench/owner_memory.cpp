// What hostile peers can make a pool's owner hold (issue 44, item 5): PEERS processes each open
// CONNECTIONS connections over tcp or shm, and on each open TRANSFERS tagged pool writes (the
// longest tag, the longest Hello name) that they never end; then they leave. The owner (this
// process) reports its RSS and malloc's in-use and free bytes before, at the peak (every peer
// done) and after the peers left (their connections closed on the owner), and what the peers
// got: transfers admitted, refused, the first refusal's text.
//
//   owner_memory --transport tcp|shm [--peers 2] [--connections 64] [--transfers 4096]
//
// Options of the owner's connector come from MEMWIRE_* (ConnectorOptions::from_environment).
// The last line is everything as JSON.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/child_process.hpp"
#include "support/transfer_opener.hpp"

namespace {

using namespace memwire;
using nlohmann::json;
using namespace std::chrono_literals;

struct Memory {
  double rss_mib = 0;
  double in_use_mib = 0;  // malloc's bytes handed out
  double free_mib = 0;    // malloc's free bytes it keeps
};

Memory measure() {
  Memory memory;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) memory.rss_mib = std::stod(line.substr(6)) / 1024;
  const auto info = ::mallinfo2();
  memory.in_use_mib = static_cast<double>(info.uordblks + info.hblkhd) / (1 << 20);
  memory.free_mib = static_cast<double>(info.fordblks) / (1 << 20);
  return memory;
}

json as_json(const Memory& memory) {
  return {{"rss_mib", memory.rss_mib},
          {"malloc_in_use_mib", memory.in_use_mib},
          {"malloc_free_mib", memory.free_mib}};
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int n = 1; n + 1 < argc; ++n)
    if (argv[n] == name) return argv[n + 1];
  return fallback;
}

// A peer process: reads the pool's metadata, opens its connections and transfers, prints one
// line per connection ("OPENED REFUSED CLOSED FIRST-REFUSAL"), then "done", and holds them all
// until its stdin says "leave" (or ends).
int open_transfers(const std::string& transport, std::size_t connections, std::size_t transfers) {
  std::string line;
  std::getline(std::cin, line);
  const auto pool = PoolMetadata::from_json(line);
  std::vector<test_support::TransferOpener> held;
  for (std::size_t c = 0; c < connections; ++c) {
    auto name = "opener-" + std::to_string(::getpid()) + "-" + std::to_string(c) + "-";
    name.resize(kMaxTagBytes, 'n');  // the longest name: the owner keeps it with each transfer
    try {
      auto& opener = held.emplace_back(pool, transport, name);
      const auto got = opener.open(transfers);
      std::cout << got.opened << ' ' << got.refused << ' ' << got.closed << ' '
                << (got.first_refusal.empty() ? "-" : got.first_refusal) << std::endl;
    } catch (const Error& error) {
      std::cout << "0 0 1 " << error.what() << std::endl;
    }
  }
  std::cout << "done" << std::endl;
  while (std::getline(std::cin, line) && line != "leave") {
  }
  return 0;
}

std::uint64_t inbound(const Connector& connector, const std::string& transport) {
  for (const auto& count : connector.telemetry().connections)
    if (count.transport == transport && count.direction == "inbound") return count.open;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto transport = flag(argc, argv, "--transport", "tcp");
  const auto peers = std::stoul(flag(argc, argv, "--peers", "2"));
  const auto connections = std::stoul(flag(argc, argv, "--connections", "64"));
  const auto transfers = std::stoul(flag(argc, argv, "--transfers", "4096"));
  if (transport != "tcp" && transport != "shm") {
    std::cerr << "usage: owner_memory --transport tcp|shm [--peers N] [--connections N] "
                 "[--transfers N]\n";
    return 2;
  }
  if (flag(argc, argv, "--open", "") == "1")
    return open_transfers(transport, connections, transfers);

  auto options = ConnectorOptions::from_environment();
  options.transports = {transport};
  Connector owner(options);
  std::vector<std::byte> memory(4096);
  auto pool = owner.register_pool({{memory.data(), memory.size(), 0, 1, {}}});
  std::this_thread::sleep_for(100ms);
  const auto before = measure();

  const auto self = std::string("/proc/") + std::to_string(::getpid()) + "/exe";
  std::vector<std::unique_ptr<test_support::ChildProcess>> children;
  for (unsigned long p = 0; p < peers; ++p) {
    children.push_back(std::make_unique<test_support::ChildProcess>(std::vector<std::string>{
        self, "--open", "1", "--transport", transport, "--connections", std::to_string(connections),
        "--transfers", std::to_string(transfers)}));
    children.back()->write_line(pool.metadata().to_json());
  }
  std::uint64_t opened = 0, refused = 0, closed = 0;
  std::string first_refusal;
  for (auto& child : children) {
    while (auto line = child->read_line(300s)) {
      if (*line == "done") break;
      std::istringstream fields(*line);
      std::uint64_t o = 0, r = 0, c = 0;
      fields >> o >> r >> c;
      opened += o, refused += r, closed += c;
      std::string why;
      std::getline(fields >> std::ws, why);
      if (first_refusal.empty() && why != "-") first_refusal = why;
    }
  }
  const auto peak = measure();
  for (auto& child : children) child->write_line("leave");
  for (auto& child : children) child->wait(30s);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (inbound(owner, transport) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(200ms);
  const auto after = measure();

  std::printf(
      "%s: %lu peers x %lu connections x %lu transfers: %llu admitted, %llu refused, "
      "%llu connections closed by the owner\n",
      transport.c_str(), peers, connections, transfers, static_cast<unsigned long long>(opened),
      static_cast<unsigned long long>(refused), static_cast<unsigned long long>(closed));
  if (!first_refusal.empty()) std::printf("  first refusal: %s\n", first_refusal.c_str());
  for (auto [name, at] : {std::pair{"before", before}, {"peak", peak}, {"after", after}})
    std::printf("  %-6s RSS %7.1f MiB, malloc in use %7.1f MiB, free %7.1f MiB\n", name, at.rss_mib,
                at.in_use_mib, at.free_mib);
  json result{{"transport", transport},     {"peers", peers},
              {"connections", connections}, {"transfers", transfers},
              {"admitted", opened},         {"refused", refused},
              {"closed", closed},           {"first_refusal", first_refusal},
              {"before", as_json(before)},  {"peak", as_json(peak)},
              {"after", as_json(after)}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
