// The stream passive side's part in request grants (Pool::grant): pinning a request to its
// grant, so that release() waits for its bytes or cuts its connection.
#include "transport/stream/stream_passive_side.hpp"

namespace memwire::detail {

AccessGate::Pin StreamPassiveSide::pin_grant(const std::shared_ptr<RequestGrant>& grant,
                                             AccessGate::Pin pin) {
  if (grants_touched_.size() >= 256)
    std::erase_if(grants_touched_, [this](const auto& entry) {
      auto live = entry.second.lock();
      if (live && !live->released() && !live->lease_over()) return false;
      if (live) live->gate().remove_breaker(reinterpret_cast<std::uintptr_t>(this));
      return true;
    });
  if (grants_touched_.try_emplace(grant->token(), grant).second)
    grant->gate().add_breaker(reinterpret_cast<std::uintptr_t>(this), [weak = connection_] {
      if (auto connection = weak.lock()) connection->shutdown("blocks released by their owner");
    });
  return pin;
}

}  // namespace memwire::detail
