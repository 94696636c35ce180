#include "transport/verbs/offered_access.hpp"

#include "core/registration.hpp"
#include "memwire/error.hpp"
#include "owner/pool_facts.hpp"

namespace memwire::detail::verbs {

OperationKind granted_kind(const Registration& registration) {
  if (!registration.pool()) return registration.kind();
  if (peers_may_read(registration) && peers_may_write(registration))
    return OperationKind::Unspecified;  // both
  return peers_may_read(registration) ? OperationKind::Read : OperationKind::Write;
}

std::shared_ptr<AccessGrant> OfferedAccess::grant(const Registration& registration,
                                                  std::size_t rail,
                                                  const std::shared_ptr<const VerbsDevice>& device,
                                                  const std::shared_ptr<ibv_pd>& own_pd,
                                                  const std::string& claimant,
                                                  std::uint64_t connection) {
  std::lock_guard lock(mutex_);
  if (revoked_) throw Error(ErrorCode::Cancelled, "the operation ended on the owner's side");
  const auto claimed = claim_.find(rail);
  if (!claimant.empty() && ((!claimant_.empty() && claimant != claimant_) ||
                            (claimed != claim_.end() && claimed->second != connection)))
    throw Error(ErrorCode::Cancelled,
                "another transfer is reading or writing this operation (a one-shot operation "
                "serves one peer's transfer)");
  std::shared_ptr<AccessGrant> granted;
  const auto kind = granted_kind(registration);
  if (own_pd)
    granted = AccessGrant::own_regions(device, own_pd, registration.descriptors(), kind, budget_);
  else if (rail < rails_.size() && rails_[rail])
    granted = AccessGrant::windows(
        rails_[rail], kind, budget_,
        rail < prepared_.size() ? std::move(prepared_[rail]) : UnboundWindows{});
  else
    throw Error(ErrorCode::Transport, "verbs: the operation was not offered on " + device->name());
  // Grants of connections that ended are forgotten: the list stays as long as the live ones.
  std::erase_if(grants_, [](const auto& weak) { return weak.expired(); });
  grants_.push_back(granted);
  if (!claimant.empty()) {
    claimant_ = claimant;
    claim_[rail] = connection;
  }
  return granted;
}

std::shared_ptr<AccessGrant> OfferedAccess::grant_ranges(
    const Registration& registration, std::size_t rail,
    const std::shared_ptr<const VerbsDevice>& device, const std::shared_ptr<ibv_pd>& own_pd,
    const std::vector<AccessGrant::Range>& ranges, OperationKind kind) {
  std::lock_guard lock(mutex_);
  if (revoked_) throw Error(ErrorCode::Cancelled, "the pool was closed by its owner");
  auto granted = AccessGrant::ranges(rail < rails_.size() ? rails_[rail] : nullptr, device, own_pd,
                                     registration.descriptors(), ranges, kind, budget_);
  std::erase_if(grants_, [](const auto& weak) { return weak.expired(); });
  grants_.push_back(granted);  // the pool's close ends it too
  return granted;
}

void OfferedAccess::revoke() noexcept {
  std::vector<std::shared_ptr<AccessGrant>> grants;
  {
    std::lock_guard lock(mutex_);
    revoked_ = true;
    prepared_.clear();
    for (const auto& weak : grants_)
      if (auto granted = weak.lock()) grants.push_back(std::move(granted));
    grants_.clear();
  }
  // All at once: n connections stalling their binds cost one deadline, not n.
  AccessGrant::invalidate_all(grants);
  if (forget_) forget_();
}

}  // namespace memwire::detail::verbs
