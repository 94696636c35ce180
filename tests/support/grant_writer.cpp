// A peer process that hammers a request grant (Pool::grant) with writes while its owner closes
// it: the other side of grant_fence_conformance_test.cpp.
//   memwire_grant_writer BLOCKS SIZE   reads one grant's metadata per line from stdin ("quit" ends)
// For each grant it writes its BLOCKS blocks of SIZE bytes (every byte 'w') into the remote
// pool, several writes in flight: the granted blocks through the grant's metadata, and every
// other block through the same token without the scope (a peer that skips its own check), until
// a write is refused as released or expired. Blocks with gaps between them make requests of
// many pieces, whose checks take the owner a while: the time a close must find them in. It
// prints "writing" once its first write landed with more under way, and "stopped LANDED" once
// none is in flight any more. The transport: MEMWIRE_TRANSPORTS.
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
  std::vector<std::byte> memory(blocks * size, std::byte{'w'});
  auto local = connector.register_pool({{memory.data(), size, 0, blocks, {}}});
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    try {
      const auto granted = PoolMetadata::from_json(line);
      const auto hostile = unscoped(granted);
      const auto& scope = *granted.scope();
      std::vector<BlockPair> inside, outside;
      for (std::uint64_t block = 0; block < blocks; ++block)
        (scope.run_holding(block, 1) >= 0 ? inside : outside).push_back({block, block});
      std::deque<BlockTransfer> flight;
      std::uint64_t landed = 0, sent = 0;
      bool over = false, said = false;
      while (!over) {
        while (flight.size() < kInFlight) {
          // Mostly inside the grant; every third write aims outside it.
          const bool out = sent % 3 == 2 && !outside.empty();
          flight.push_back(
              connector.write_blocks(local, out ? outside : inside, out ? hostile : granted));
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
