// What hostile peers can make a pool's owner hold (issue 44, item 5): PEERS processes each open
// CONNECTIONS connections over tcp or shm, and on each open TRANSFERS tagged pool writes (the
// longest tag, the longest Hello name) that they never end; then they leave. The owner (this
// process) reports its RSS and malloc's in-use and free bytes before, at the peak (every peer
// done), after the peers left (their connections closed on the owner) and after a
// malloc_trim(0) of its own (what of "after" was malloc's cache alone), and what the peers got:
// transfers admitted, refused, the first refusal's text.
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
    return test_support::hold_open_transfers(std::cin, std::cout, transport, connections,
                                             transfers);

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
  test_support::HeldTransfers held;
  for (auto& child : children)
    while (auto line = child->read_line(300s))
      if (!held.add(*line)) break;
  const auto peak = measure();
  for (auto& child : children) child->write_line("leave");
  for (auto& child : children) child->wait(30s);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (inbound(owner, transport) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(200ms);
  const auto after = measure();
  // What malloc_trim would still give back: the part of `after` that is malloc's cache alone.
  ::malloc_trim(0);
  const auto trimmed = measure();

  std::printf(
      "%s: %lu peers x %lu connections x %lu transfers: %zu admitted, %zu refused, "
      "%zu connections closed by the owner\n",
      transport.c_str(), peers, connections, transfers, held.opened, held.refused, held.closed);
  if (!held.first_refusal.empty()) std::printf("  first refusal: %s\n", held.first_refusal.c_str());
  for (auto [name, at] :
       {std::pair{"before", before}, {"peak", peak}, {"after", after}, {"trim", trimmed}})
    std::printf("  %-6s RSS %7.1f MiB, malloc in use %7.1f MiB, free %7.1f MiB\n", name, at.rss_mib,
                at.in_use_mib, at.free_mib);
  json result{{"transport", transport},     {"peers", peers},
              {"connections", connections}, {"transfers", transfers},
              {"admitted", held.opened},    {"refused", held.refused},
              {"closed", held.closed},      {"first_refusal", held.first_refusal},
              {"before", as_json(before)},  {"peak", as_json(peak)},
              {"after", as_json(after)},    {"after_malloc_trim", as_json(trimmed)}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
