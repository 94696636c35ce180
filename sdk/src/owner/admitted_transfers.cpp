#include "owner/admitted_transfers.hpp"

#include <utility>

#include "memwire/error.hpp"

namespace memwire::detail {

bool AdmittedTransfers::admit(std::uint64_t id, Transfer request) {
  if (auto found = open_.find(id); found != open_.end()) {
    const auto& first = found->second;
    if (first.key != request.key || first.kind != request.kind || first.tag != request.tag ||
        first.peer != request.peer)
      throw Error(ErrorCode::Protocol, "protocol error: a request of transfer " +
                                           std::to_string(id) +
                                           " names another pool, kind, tag or peer than its first");
    return false;
  }
  if (ended_.contains(id))
    throw Error(ErrorCode::Protocol,
                "protocol error: a request of transfer " + std::to_string(id) + " after its end");
  // A granted peer's (a grant's token: authenticated) counts by the name its grant gives it,
  // in the room shared-token peers never take.
  try {
    account_->open(granted_name(request));
  } catch (const Error&) {
    // Remembered as failed, in the refused peer's own class: its PoolEnd may follow.
    ended(id, Outcome::Failed, request.peer.authenticated);
    throw;
  }
  open_.emplace(id, std::move(request));
  return true;
}

void AdmittedTransfers::refuse(std::uint64_t id) {
  if (auto found = open_.find(id); found != open_.end()) {
    found->second.failed = true;
    return;
  }
  if (!ended_.contains(id)) ended(id, Outcome::Failed, false);
}

const AdmittedTransfers::Transfer* AdmittedTransfers::find(std::uint64_t id) const {
  auto found = open_.find(id);
  return found == open_.end() ? nullptr : &found->second;
}

std::optional<AdmittedTransfers::Transfer> AdmittedTransfers::take(std::uint64_t id) {
  auto found = open_.find(id);
  if (found == open_.end()) return std::nullopt;
  auto transfer = std::move(found->second);
  open_.erase(found);
  account_->close(granted_name(transfer));
  return transfer;
}

std::unordered_map<std::uint64_t, AdmittedTransfers::Transfer> AdmittedTransfers::take_all() {
  account_->release_all(TransferBudget::Record::Open);
  return std::exchange(open_, {});
}

void AdmittedTransfers::ended(std::uint64_t id, Outcome outcome, bool granted) {
  if (auto found = ended_.find(id); found != ended_.end()) {
    found->second.outcome = outcome;
    return;
  }
  while (!account_->remember(granted)) {
    if (ended_order_.empty()) return;
    const auto oldest = ended_.find(ended_order_.front());
    account_->forget(oldest->second.granted);
    ended_.erase(oldest);
    ended_order_.pop_front();
  }
  ended_.emplace(id, Ended{outcome, granted});
  ended_order_.push_back(id);
}

AdmittedTransfers::Outcome AdmittedTransfers::outcome(std::uint64_t id) const {
  auto found = ended_.find(id);
  return found == ended_.end() ? Outcome::Unknown : found->second.outcome;
}

const std::string& AdmittedTransfers::granted_name(const Transfer& transfer) {
  static const std::string kShared;
  return transfer.peer.authenticated ? transfer.peer.name : kShared;
}

}  // namespace memwire::detail
