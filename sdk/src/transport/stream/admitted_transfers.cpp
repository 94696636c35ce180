#include "transport/stream/admitted_transfers.hpp"

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
  account_->open();
  open_.emplace(id, std::move(request));
  return true;
}

void AdmittedTransfers::refuse(std::uint64_t id) {
  if (auto found = open_.find(id); found != open_.end()) {
    found->second.failed = true;
    return;
  }
  if (!ended_.contains(id)) ended(id, Outcome::Failed);
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
  account_->release(TransferBudget::Record::Open);
  return transfer;
}

std::unordered_map<std::uint64_t, AdmittedTransfers::Transfer> AdmittedTransfers::take_all() {
  account_->release(TransferBudget::Record::Open, open_.size());
  return std::exchange(open_, {});
}

void AdmittedTransfers::ended(std::uint64_t id, Outcome outcome) {
  if (auto found = ended_.find(id); found != ended_.end()) {
    found->second = outcome;
    return;
  }
  while (!account_->remember()) {
    if (ended_order_.empty()) return;
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
    account_->release(TransferBudget::Record::Remembered);
  }
  ended_.emplace(id, outcome);
  ended_order_.push_back(id);
}

AdmittedTransfers::Outcome AdmittedTransfers::outcome(std::uint64_t id) const {
  auto found = ended_.find(id);
  return found == ended_.end() ? Outcome::Unknown : found->second;
}

}  // namespace memwire::detail
