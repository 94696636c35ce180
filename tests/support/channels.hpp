#pragma once

#include <string>
#include <vector>

#include "memwire/sideband/config.hpp"

namespace memwire::test_support {

// The channels this build has, for tests parameterised over channels: a channel switched off
// (MEMWIRE_WITH_NATS=OFF, ...) is not instantiated at all, rather than skipped as passed.
inline std::vector<std::string> enabled_channels() {
  std::vector<std::string> channels;
#if MEMWIRE_HAVE_HTTP
  channels.emplace_back("http");
#endif
#if MEMWIRE_HAVE_NATS
  channels.emplace_back("nats");
#endif
  return channels;
}

}  // namespace memwire::test_support
