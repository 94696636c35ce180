#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/registration.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/status.hpp"
#include "transport/verbs/access_grant.hpp"

namespace memwire::detail::verbs {

// The verbs side of one passive operation: its bindable regions on each rail (devices with
// type-2 windows) and every grant handed out for it. revoke() (completed, cancelled, dropped)
// ends every grant before the registration finishes, all together under one deadline (see
// AccessGrant::invalidate_all), then has the connections forget them; the regions go once no
// grant needs them.
// What a grant for `registration` allows: its kind, or for a pool what its options allow
// (Unspecified: read and write).
OperationKind granted_kind(const Registration& registration);

class OfferedAccess final : public TransportState {
 public:
  // `rails`: per engine rail, its bindable regions, or null where grants register their own.
  // `budget`: the connector's remote keys, which every grant takes from. `forget`: callable on
  // any thread, drops the connections' entries for this operation once it is revoked.
  // `prepared`: per rail, windows for the first grant there (a one-shot operation has one).
  OfferedAccess(std::vector<std::shared_ptr<const BindableRegions>> rails,
                std::shared_ptr<KeyBudget> budget, std::function<void()> forget,
                std::vector<UnboundWindows> prepared = {})
      : rails_(std::move(rails)),
        budget_(std::move(budget)),
        forget_(std::move(forget)),
        prepared_(std::move(prepared)) {}

  // Access to `registration` (the one this is attached to) for the connection on `rail` whose
  // peer presented the token: windows over the rail's bindable regions, or regions in
  // `own_pd`. Throws Error{Cancelled} once revoked, Error{Transport} when the device refuses
  // or the connector holds its limit of keys.
  // A one-shot operation (`claimant` non-empty) serves one transfer: on each rail, the first
  // connection granted it (`connection`, a serial never reused) holds it, and any other
  // connection there is refused with Error{Cancelled}, whatever it calls itself. `claimant`
  // (the peer's name for its transfer, the same on each rail) only ties the rails of that one
  // transfer together. Settled here, before a byte moves, a reader completes on its own READs
  // and needs no Result to learn whether it lost a race.
  std::shared_ptr<AccessGrant> grant(const Registration& registration, std::size_t rail,
                                     const std::shared_ptr<const VerbsDevice>& device,
                                     const std::shared_ptr<ibv_pd>& own_pd,
                                     const std::string& claimant, std::uint64_t connection);
  // Access for one request grant of a pool: a window (or region) per range, with `kind`.
  std::shared_ptr<AccessGrant> grant_ranges(const Registration& registration, std::size_t rail,
                                            const std::shared_ptr<const VerbsDevice>& device,
                                            const std::shared_ptr<ibv_pd>& own_pd,
                                            const std::vector<AccessGrant::Range>& ranges,
                                            OperationKind kind);
  void revoke() noexcept override;

 private:
  const std::vector<std::shared_ptr<const BindableRegions>> rails_;
  const std::shared_ptr<KeyBudget> budget_;
  const std::function<void()> forget_;
  std::mutex mutex_;
  bool revoked_ = false;
  std::string claimant_;                        // the transfer a one-shot operation serves
  std::map<std::size_t, std::uint64_t> claim_;  // per rail, the connection that holds it
  std::vector<std::weak_ptr<AccessGrant>> grants_;
  std::vector<UnboundWindows> prepared_;  // by rail, until a grant there takes them
};

}  // namespace memwire::detail::verbs
