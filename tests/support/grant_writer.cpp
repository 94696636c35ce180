// A peer process that hammers a request grant (Pool::grant) with writes while its owner closes
// it: the other side of grant_fence_conformance_test.cpp.
//   memwire_grant_writer BLOCKS SIZE   reads "FILL METADATA" per line from stdin ("quit" ends)
// For each grant it writes its BLOCKS blocks of SIZE bytes into the remote pool, several writes
// in flight: the granted blocks through the grant's metadata, and every other block through
// the same token without the scope (a peer that skips its own check), until a write is refused
// as released or expired. Each write carries its own value in every byte: FILL for the round's
// first, then one more (modulo 255, never 0) for each next, so that a write landing after the
// grant's end changes what the owner saw at the end, whatever landed before. Blocks with gaps
// between them make requests of many pieces, whose checks take the owner a while: the time a
// close must find them in. It prints "writing" once its first write landed with more under
// way, and "stopped LANDED" once none is in flight any more. The transport: MEMWIRE_TRANSPORTS.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"

using namespace memwire;

namespace {

constexpr std::size_t kInFlight = 4;

// The grant's token and pool without its scope: what a peer that checks nothing would send.
PoolMetadata unscoped(const PoolMetadata& granted) { return PoolMetadata(granted.fields()); }

// True when `transfer` ended because the grant is over (the round's end).
bool ended_by_release(BlockTransfer& transfer, std::uint64_t& landed) {
  try {
    transfer.wait_for_completion(std::chrono::seconds(30));
    ++landed;
    return false;
  } catch (const Error& error) {
    return error.code() == ErrorCode::Cancelled || error.code() == ErrorCode::Expired;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: memwire_grant_writer BLOCKS SIZE\n";
    return 2;
  }
  const auto blocks = std::strtoull(argv[1], nullptr, 10);
  const auto size = std::strtoull(argv[2], nullptr, 10);
  Connector connector(ConnectorOptions::from_environment());
  // One copy of the blocks per write in flight (slot), each filled with its write's value: a
  // slot is refilled only once its last write ended.
  std::vector<std::byte> memory(kInFlight * blocks * size);
  auto local = connector.register_pool({{memory.data(), size, 0, kInFlight * blocks, {}}});
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    try {
      const auto fill = std::strtoul(line.c_str(), nullptr, 10);
      line.erase(0, line.find(' ') + 1);  // the metadata, the line's rest
      const auto granted = PoolMetadata::from_json(line);
      const auto hostile = unscoped(granted);
      const auto& scope = *granted.scope();
      // Each slot's pairs: remote block b from the slot's copy of block b.
      std::vector<std::vector<BlockPair>> inside(kInFlight), outside(kInFlight);
      for (std::uint64_t slot = 0; slot < kInFlight; ++slot)
        for (std::uint64_t block = 0; block < blocks; ++block)
          (scope.run_holding(block, 1) >= 0 ? inside : outside)[slot].push_back(
              {block, slot * blocks + block});
      std::deque<BlockTransfer> flight;
      std::uint64_t landed = 0, sent = 0;
      bool over = false, said = false;
      while (!over) {
        while (flight.size() < kInFlight) {
          const auto slot = sent % kInFlight;
          const auto value = static_cast<std::byte>(1 + (fill - 1 + sent) % 255);
          std::fill_n(memory.begin() + slot * blocks * size, blocks * size, value);
          // Mostly inside the grant; every third write aims outside it.
          const bool out = sent % 3 == 2 && !outside[slot].empty();
          flight.push_back(connector.write_blocks(local, out ? outside[slot] : inside[slot],
                                                  out ? hostile : granted));
          ++sent;
        }
        over = ended_by_release(flight.front(), landed);
        flight.pop_front();
        if (!said) {
          // The first write landed (the owner closes only after it), the others are under way.
          std::cout << (over ? "refused" : "writing") << std::endl;
          said = true;
        }
      }
      while (!flight.empty()) {
        (void)ended_by_release(flight.front(), landed);
        flight.pop_front();
      }
      std::cout << "stopped " << landed << std::endl;
    } catch (const Error& error) {
      std::cout << "error " << error.what() << std::endl;
    }
  }
  return 0;
}
