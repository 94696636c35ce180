#pragma once

#include "transport/verbs/outbound_transfer.hpp"
#include "transport/verbs/rail.hpp"

namespace memwire::detail::verbs {

// Fills `leg.regions` (one per local descriptor of its transfer) from the rail's cache: a
// pool's regions, registered with the pool, are found; a one-shot transfer's descriptors are
// registered, one region per run of them (DescriptorRuns). Throws Error{Transport} when the
// memory cannot be registered.
void acquire_local_regions(Rail& rail, OutboundTransfer& leg);

}  // namespace memwire::detail::verbs
