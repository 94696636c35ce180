#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/transfer_request.hpp"
#include "memwire/error.hpp"
#include "memwire/pool_metadata.hpp"

namespace memwire::detail {

// The windows of a request grant on verbs, as both sides count them: one per run of granted
// blocks, split where a run crosses from one region into the next. The owner binds them in
// this order; the peer takes the keys in the same order.
struct GrantWindow {
  std::uint32_t region = 0;
  std::uint64_t offset = 0;  // in the region
  std::uint64_t length = 0;
};

inline std::vector<GrantWindow> grant_windows(const PoolMetadata& pool, const RequestScope& scope) {
  std::vector<GrantWindow> windows;
  for (const auto& run : scope.runs) {
    for (auto block = run.first; block < run.first + run.count;) {
      const auto place = pool.locate(block);
      auto end = block + 1;
      while (end < run.first + run.count && pool.locate(end).region == place.region) ++end;
      const auto tail = pool.locate(end - 1);
      windows.push_back({place.region, place.offset, tail.offset + tail.size - place.offset});
      block = end;
    }
  }
  return windows;
}

// The window holding bytes [offset, offset + length) of `region`, or -1.
inline std::int64_t window_holding(const std::vector<GrantWindow>& windows, std::uint32_t region,
                                   std::uint64_t offset, std::uint64_t length) {
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const auto& window = windows[i];
    if (window.region == region && offset >= window.offset &&
        offset - window.offset + length <= window.length)
      return static_cast<std::int64_t>(i);
  }
  return -1;
}

// Why a transfer of `kind` planned as `plan` may not move under `remote`'s request grant (its
// access, its runs: RequestScope), for the peer to refuse it before sending; nothing when it
// may, or when `remote` holds no grant. Needs plan_grant_windows() first.
inline std::optional<Error> outside_scope(const TransferRequest& plan, const PoolMetadata& remote,
                                          OperationKind kind) {
  const auto* scope = remote.scope();
  if (scope == nullptr) return std::nullopt;
  const auto wanted = kind == OperationKind::Read ? Access::Read : Access::Write;
  if ((static_cast<unsigned>(scope->access) & static_cast<unsigned>(wanted)) == 0)
    return Error(ErrorCode::AccessDenied, "the grant for request " + scope->request +
                                              " allows no remote " + std::string(to_string(kind)) +
                                              " (refused before any byte moved)");
  for (const auto window : plan.segment_windows)
    if (window == TransferRequest::kNoWindow)
      return Error(ErrorCode::AccessDenied, "blocks outside those granted for request " +
                                                scope->request +
                                                " (refused before any byte moved)");
  return std::nullopt;
}

// Fills plan's grant windows when `remote` is a request grant's metadata.
inline void plan_grant_windows(TransferRequest& plan, const PoolMetadata& remote) {
  if (!remote.scope()) return;
  const auto windows = grant_windows(remote, *remote.scope());
  plan.grant_windows = windows.size();
  plan.segment_windows.reserve(plan.segments.size());
  for (const auto& segment : plan.segments) {
    const auto found =
        window_holding(windows, segment.remote_region, segment.remote_offset, segment.length);
    plan.segment_windows.push_back(found < 0 ? TransferRequest::kNoWindow
                                             : static_cast<std::uint32_t>(found));
  }
}

}  // namespace memwire::detail
