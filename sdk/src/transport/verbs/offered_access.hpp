#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memwire/descriptor.hpp"
#include "memwire/status.hpp"
#include "registration.hpp"
#include "transport/verbs/access_grant.hpp"

namespace memwire::detail::verbs {

// The verbs side of one passive operation: its bindable regions on each rail (devices with
// type-2 windows) and every grant handed out for it. revoke() (completed, cancelled, dropped)
// ends every grant before the registration finishes; the regions go once no grant needs them.
// What a grant for `registration` allows: its kind, or for a pool what its options allow
// (Unspecified: read and write).
OperationKind granted_kind(const Registration& registration);

class OfferedAccess final : public TransportState {
 public:
  // `rails`: per engine rail, its bindable regions, or null where grants register their own.
  explicit OfferedAccess(std::vector<std::shared_ptr<const BindableRegions>> rails)
      : rails_(std::move(rails)) {}

  // Access to `registration` (the one this is attached to) for the connection on `rail` whose
  // peer presented the token: windows over the rail's bindable regions, or regions in
  // `own_pd`. Throws Error{Cancelled} once revoked, Error{Transport} when the device refuses.
  // `claimant` names the peer's transfer (empty for a pool, which serves every peer): a
  // one-shot operation is granted to the first transfer only, on each of its rails, and any
  // other is refused with Error{Cancelled}. Settled here, before a byte moves, a reader
  // completes on its own READs and needs no Result to learn whether it lost a race.
  std::shared_ptr<AccessGrant> grant(const Registration& registration, std::size_t rail,
                                     const std::shared_ptr<const VerbsDevice>& device,
                                     const std::shared_ptr<ibv_pd>& own_pd,
                                     const std::string& claimant);
  void revoke() noexcept override;

 private:
  const std::vector<std::shared_ptr<const BindableRegions>> rails_;
  std::mutex mutex_;
  bool revoked_ = false;
  std::string claimant_;  // the transfer a one-shot operation was granted to
  std::vector<std::weak_ptr<AccessGrant>> grants_;
};

}  // namespace memwire::detail::verbs
