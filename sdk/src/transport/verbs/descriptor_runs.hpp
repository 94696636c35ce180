#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memwire/descriptor.hpp"

namespace memwire::detail::verbs {

// Descriptors that lie end to end in memory, in order, form a run: one memory region (and one
// window) covers a run, so one buffer cut into many descriptors costs one registration and one
// key, not one each. A run covers exactly the bytes of its descriptors.
struct DescriptorRuns {
  static constexpr std::size_t kNone = SIZE_MAX;
  std::vector<Descriptor> runs;              // each run's bytes
  std::vector<std::size_t> run_of;           // per descriptor: its run, kNone for an empty one
  std::vector<std::uint64_t> offset_in_run;  // per descriptor: where it starts in its run
};

DescriptorRuns runs_of(const std::vector<Descriptor>& descriptors);

}  // namespace memwire::detail::verbs
