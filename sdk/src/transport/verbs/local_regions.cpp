#include "transport/verbs/local_regions.hpp"

#include <cstddef>
#include <cstdint>

#include "core/registration.hpp"
#include "transport/verbs/descriptor_runs.hpp"

namespace memwire::detail::verbs {

void acquire_local_regions(Rail& rail, OutboundTransfer& leg) {
  const auto& transfer = *leg.stripe->transfer;
  const int access = transfer.kind() == OperationKind::Read ? IBV_ACCESS_LOCAL_WRITE : 0;
  auto& cache = rail.local_regions;
  leg.regions.clear();
  const auto& request = transfer.request();
  if (request.local_registration) {
    // Registered memory: its regions, each registered once for every transfer. A sliced
    // transfer has a run per slice, mostly of one region: looked up once per change of region,
    // not per run.
    const auto& regions = request.local_registration->descriptors();
    std::shared_ptr<const ibv_mr> current;
    std::uint32_t current_region = 0;
    for (const auto& segment : request.segments) {
      if (!current || segment.local_region != current_region) {
        const auto& region = regions[segment.local_region];
        current = cache.acquire(region.ptr(), region.size(), access);
        current_region = segment.local_region;
      }
      leg.regions.push_back(current);
    }
    return;
  }
  const auto runs = runs_of(transfer.local());
  std::vector<std::shared_ptr<const ibv_mr>> regions;
  regions.reserve(runs.runs.size());
  for (const auto& run : runs.runs) regions.push_back(cache.acquire(run.ptr(), run.size(), access));
  leg.regions.reserve(runs.run_of.size());
  for (const auto run : runs.run_of)
    leg.regions.push_back(run == DescriptorRuns::kNone ? nullptr : regions[run]);
}

}  // namespace memwire::detail::verbs
