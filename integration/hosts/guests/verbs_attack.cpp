// The key-guessing attack of issue 20 across the two-guest wire.
//
//   memwire-verbs-attack victim METADATA_FILE DONE_FILE SECONDS
//     Offers a 128 KiB pool as readable A (first half) and readable B (second half), and a
//     1 MiB writable W; writes A's metadata to METADATA_FILE; waits for DONE_FILE (or SECONDS),
//     then prints "victim-summary w-unchanged=0|1 a=STATUS b=STATUS w=STATUS peer-faults=N
//     refused-connections=N" and exits 0 when W is unchanged and B and W were never begun.
//   memwire-verbs-attack attack METADATA_FILE MAX_GUESSES
//     Holds A's metadata, as any reader of A does, and on every rail of the owner: begins A
//     (the control: its key reads A on that QP), then tries that key from another QP, at B
//     (just past A's window), and up to MAX_GUESSES keys around it at B (a connection each:
//     a wrong key breaks the QP); then sends Done on the first rail and tries every key again.
//     Prints "attack-summary rail=ADDRESS control=ok|failed stolen-key=refused|ACCEPTED
//     beyond-window=refused|ACCEPTED guesses=N accepted=N refused-after=N|never done=ok|failed
//     done-key=refused|ACCEPTED" per rail; exits 0 when every attempt was refused, the control
//     worked and the owner refused the guesser before MAX_GUESSES.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/raw_verbs_peer.hpp"

using namespace memwire;
using memwire::test_support::rail_addresses;
using memwire::test_support::RawVerbsPeer;

namespace {

constexpr std::size_t kHalf = 64 * 1024;

int victim(const std::string& metadata_file, const std::string& done_file, int seconds) {
  Connector owner(ConnectorOptions::from_environment());
  std::vector<std::byte> pool(2 * kHalf), w(1 << 20, std::byte{0x77});
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = std::byte(i * 131 + 7);
  auto a = owner.create_readable({Descriptor(pool.data(), kHalf)});
  auto b = owner.create_readable({Descriptor(pool.data() + kHalf, kHalf)});
  auto writable = owner.create_writable({Descriptor(std::span(w))});
  {
    std::ofstream out(metadata_file + ".tmp");
    out << a.metadata().to_json();
  }
  std::filesystem::rename(metadata_file + ".tmp", metadata_file);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  // The attacker's side says when it is done through the shared folder: no event to wait on.
  while (!std::filesystem::exists(done_file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool unchanged =
      std::all_of(w.begin(), w.end(), [](std::byte v) { return v == std::byte{0x77}; });
  const auto telemetry = owner.telemetry();
  std::cout << "victim-summary w-unchanged=" << unchanged << " a=" << to_string(a.status())
            << " b=" << to_string(b.status()) << " w=" << to_string(writable.status())
            << " peer-faults=" << telemetry.peer_faults
            << " refused-connections=" << telemetry.refused_connections << std::endl;
  const bool untouched = b.status() == OperationStatus::Initialized &&
                         writable.status() == OperationStatus::Initialized;
  return unchanged && untouched ? 0 : 1;
}

// One READ at (address, key) from a fresh QP: whether it succeeded; throws when the owner
// refuses the connection.
bool fresh_read(const std::string& rail, std::uint64_t address, std::uint32_t key) {
  RawVerbsPeer guesser(rail, "attacker");
  std::vector<std::byte> local(4096);
  return guesser.access(true, local, address, key) == IBV_WC_SUCCESS;
}

int attack(const std::string& metadata_file, int max_guesses) {
  std::ifstream in(metadata_file);
  std::stringstream text;
  text << in.rdbuf();
  const auto metadata = RdmaMetadata::from_json(text.str());
  const auto a_address = metadata.descriptors().at(0).ptr;
  const auto b_address = a_address + kHalf;
  bool all_refused = true;
  // A legitimate reader's connection on every rail (a striped read begins A on each).
  std::vector<std::unique_ptr<RawVerbsPeer>> readers;
  std::vector<std::uint32_t> keys;
  std::vector<std::string> lines;
  std::vector<std::byte> local(4096);
  std::uint64_t seq = 1;
  for (const auto& rail : rail_addresses(metadata)) {
    std::ostringstream line;
    line << "attack-summary rail=" << rail;
    readers.push_back(std::make_unique<RawVerbsPeer>(rail, "attacker"));
    const auto grant = readers.back()->begin(metadata, seq++);
    const auto key = grant.rkeys.empty() ? 0u : grant.rkeys[0];
    keys.push_back(key);
    const bool control =
        grant.accepted && readers.back()->access(true, local, a_address, key) == IBV_WC_SUCCESS;
    line << " control=" << (control ? "ok" : "failed");
    bool stolen = false, beyond = false;
    try {
      stolen = fresh_read(rail, a_address, key);
      beyond = fresh_read(rail, b_address, key);
    } catch (const std::exception&) {
    }
    line << " stolen-key=" << (stolen ? "ACCEPTED" : "refused")
         << " beyond-window=" << (beyond ? "ACCEPTED" : "refused");
    int guesses = 0, accepted = 0, refused_after = -1;
    for (std::uint32_t index = (key >> 8) - 2;
         guesses < max_guesses && refused_after < 0 && index <= (key >> 8) + 2; ++index)
      for (std::uint32_t low = 0; low < 256 && guesses < max_guesses; ++low) {
        ++guesses;
        try {
          if (fresh_read(rail, b_address, (index << 8) | low)) ++accepted;
        } catch (const std::exception&) {
          refused_after = guesses;
          break;
        }
      }
    line << " guesses=" << guesses << " accepted=" << accepted << " refused-after="
         << (refused_after < 0 ? std::string("never") : std::to_string(refused_after));
    lines.push_back(line.str());
    all_refused =
        all_refused && control && !stolen && !beyond && accepted == 0 && refused_after > 0;
  }
  // The legitimate end of A's read, on the first rail: every rail's key must stop working.
  const auto result = readers.front()->done(metadata, 1);
  for (std::size_t rail = 0; rail < readers.size(); ++rail) {
    const bool done_key =
        readers[rail]->access(true, local, a_address, keys[rail]) == IBV_WC_SUCCESS;
    std::cout << lines[rail] << " done=" << (result && !*result ? "ok" : "failed")
              << " done-key=" << (done_key ? "ACCEPTED" : "refused") << std::endl;
    all_refused = all_refused && !done_key && result && !*result;
  }
  return all_refused ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "victim" && argc == 5) return victim(argv[2], argv[3], std::atoi(argv[4]));
    if (mode == "attack" && argc == 4) return attack(argv[2], std::atoi(argv[3]));
    std::cerr << "usage: memwire-verbs-attack victim METADATA_FILE DONE_FILE SECONDS\n"
                 "       memwire-verbs-attack attack METADATA_FILE MAX_GUESSES\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "memwire-verbs-attack: " << error.what() << "\n";
    return 1;
  }
}
