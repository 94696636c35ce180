#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "memwire/metadata.hpp"
#include "support/built_programs.hpp"
#include "support/child_process.hpp"

namespace memwire::test_support {

// Starts tests/support/test_peer.cpp (memwire::test::peer_program()) with `arguments`.
inline ChildProcess start_test_peer(std::initializer_list<std::string> arguments,
                                    const std::vector<std::string>& environment = {}) {
  std::vector<std::string> argv{memwire::test::peer_program()};
  argv.insert(argv.end(), arguments);
  return ChildProcess(argv, environment);
}

// The peer's next line; a test failure (and "") when it says nothing in time.
inline std::string expect_line(ChildProcess& child,
                               std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto line = child.read_line(timeout);
  EXPECT_TRUE(line.has_value()) << "the peer said nothing";
  return line.value_or("");
}

// A peer that publishes an operation (`kind`: "readable" or "writable") over `size` bytes with
// the pattern of `seed`, and the metadata it printed.
struct PublishingPeer {
  PublishingPeer(const std::string& kind, std::size_t size, std::uint64_t seed,
                 const std::vector<std::string>& environment = {})
      : child(start_test_peer({"publish", kind, std::to_string(size), std::to_string(seed)},
                              environment)),
        metadata(RdmaMetadata::from_json(expect_line(child))) {}

  ChildProcess child;
  RdmaMetadata metadata;
};

}  // namespace memwire::test_support
