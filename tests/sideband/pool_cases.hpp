#pragma once

// What the pool tests of every channel share: a small pool on a tcp-only connector whose blocks
// hold known bytes, and a reader that moves them with read_blocks from metadata it fetched.

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "memwire/connector.hpp"
#include "memwire/pool.hpp"
#include "support/pattern.hpp"
#include "support/tcp_only.hpp"

namespace memwire::sideband::pool_cases {

inline constexpr std::size_t kBlock = 4096;
inline constexpr std::uint64_t kBlocks = 8;

using memwire::test_support::tcp_only;

// A connector and one registered pool of kBlocks blocks; block b holds pattern seed + b.
struct PoolSide {
  explicit PoolSide(std::uint64_t seed = 0, std::string name = "kv")
      : connector(tcp_only()), memory(kBlocks * kBlock) {
    if (seed != 0)
      for (std::uint64_t b = 0; b < kBlocks; ++b) test_support::fill_pattern(block(b), seed + b);
    PoolOptions options;
    options.name = std::move(name);
    pool = std::make_unique<Pool>(
        connector.register_pool({{memory.data(), kBlock, 0, kBlocks, {}}}, options));
  }
  std::span<std::byte> block(std::uint64_t b) {
    return std::span(memory).subspan(b * kBlock, kBlock);
  }
  bool holds(std::uint64_t b, std::uint64_t seed) {
    return test_support::first_mismatch(block(b), seed) == kBlock;
  }

  Connector connector;
  std::vector<std::byte> memory;
  std::unique_ptr<Pool> pool;
};

// Reads remote blocks 1, 2 and 5 into local blocks 0, 1 and 7 with `remote` (fetched by name)
// and checks the bytes that arrived; returns the transfer's status.
inline OperationStatus read_three_blocks(PoolSide& reader, const PoolMetadata& remote) {
  auto read = reader.connector.read_blocks(remote, {{1, 0}, {2, 1}, {5, 7}}, *reader.pool);
  return read.wait_for_completion(std::chrono::seconds(30));
}

}  // namespace memwire::sideband::pool_cases
