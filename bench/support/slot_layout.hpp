#pragma once
// The transfer benchmark's buffers, laid out alike by its driver (transfer_bench) and its peer
// (transfer_peer): SLOTS buffers of SIZE bytes, each split into DESCS descriptors GAP x their
// size apart, filled with a pattern that the other side checks after a transfer.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.hpp"
#include "memwire/descriptor.hpp"
#include "support/pattern.hpp"

namespace memwire::bench {

struct SlotLayout {
  std::byte* memory = nullptr;  // slot_size * slots.size() * gap bytes, owned by the caller
  std::size_t slot_size = 0;
  unsigned gap = 1;
  std::vector<std::vector<Descriptor>> slots;

  SlotLayout() = default;
  // Fills each slot with the pattern of `seed` (per descriptor when gap > 1), or with zeros for
  // seed 0: every page is touched either way, so that none faults while timed.
  SlotLayout(std::byte* base_memory, std::size_t size, unsigned descs, unsigned slot_count,
             std::uint64_t seed, unsigned gap_factor)
      : memory(base_memory), slot_size(size), gap(gap_factor) {
    const std::size_t piece = size / descs;
    for (unsigned s = 0; s < slot_count; ++s) {
      std::byte* base = memory + s * size * gap;
      if (seed != 0 && gap == 1) {
        test_support::fill_pattern({base, size}, seed);
      } else {
        std::memset(base, 0, size * gap);
      }
      std::vector<Descriptor> list;
      for (unsigned d = 0; d < descs; ++d) {
        const std::size_t length = d + 1 == descs ? size - piece * d : piece;
        std::byte* start = base + piece * d * gap;
        if (seed != 0 && gap > 1)
          test_support::fill_pattern({start, length}, descriptor_seed(seed, d));
        list.emplace_back(start, length);
      }
      slots.push_back(std::move(list));
    }
  }

  // Empty when every slot holds the pattern of `seed`; else the first place that does not:
  // "buffer S, descriptor D" or "buffer S of N, byte B".
  std::string damage(std::uint64_t seed) const {
    if (gap > 1) {
      for (std::size_t s = 0; s < slots.size(); ++s)
        for (unsigned d = 0; d < slots[s].size(); ++d) {
          const auto& piece = slots[s][d];
          std::span<const std::byte> bytes(static_cast<const std::byte*>(piece.ptr()),
                                           piece.size());
          if (test_support::first_mismatch(bytes, descriptor_seed(seed, d)) != bytes.size())
            return "buffer " + std::to_string(s) + ", descriptor " + std::to_string(d);
        }
      return "";
    }
    for (std::size_t s = 0; s < slots.size(); ++s) {
      auto bad = test_support::first_mismatch({memory + s * slot_size, slot_size}, seed);
      if (bad != slot_size) {
        return "buffer " + std::to_string(s) + " of " + std::to_string(slots.size()) + ", byte " +
               std::to_string(bad);
      }
    }
    return "";
  }
};

}  // namespace memwire::bench
