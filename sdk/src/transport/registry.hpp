#pragma once
// The one list of transports (registry.cpp, from the folders under sdk/src/transport/): what
// telemetry counts, what error texts and the conformance suite name.

#include <string_view>
#include <vector>

namespace memwire::detail {

// Every transport this memwire knows, built into it or not, in the registry's order.
std::vector<std::string_view> known_transports();

}  // namespace memwire::detail
