#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transport/verbs/local_mr_cache.hpp"
#include "transport/verbs/verbs_device.hpp"
#include "transport/verbs/verbs_handles.hpp"

namespace memwire::detail::verbs {

// One RDMA device this engine moves bytes over: its listener, its completion channel, the
// cache of local memory regions on it, and what it moved.
struct Rail {
  explicit Rail(std::shared_ptr<const VerbsDevice> rail_device);
  std::shared_ptr<const VerbsDevice> device;
  LocalMrCache local_regions;
  CompChannel completions;
  CmId listener;
  std::string address;  // "ip:port" its listener is bound to
  std::uint64_t chunk_bytes = 0;
  std::uint64_t bytes_moved = 0;  // under the engine's work only
  std::uint64_t slices_moved = 0;
  bool own_pd_per_peer = false;  // no type-2 windows: a protection domain per accepted peer
  std::optional<std::chrono::steady_clock::time_point> failed_at;  // a connection on it last failed
  bool failed_within(std::chrono::steady_clock::duration span,
                     std::chrono::steady_clock::time_point now) const noexcept {
    return failed_at && now - *failed_at < span;
  }
};

}  // namespace memwire::detail::verbs
