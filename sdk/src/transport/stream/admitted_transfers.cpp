#include "transport/stream/admitted_transfers.hpp"

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
  if (open_.size() == kMostOpen)
    throw Error(ErrorCode::Transport, "more than " + std::to_string(kMostOpen) +
                                          " tagged pool transfers open on one connection");
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
  return transfer;
}

void AdmittedTransfers::ended(std::uint64_t id, Outcome outcome) {
  if (ended_.insert_or_assign(id, outcome).second) ended_order_.push_back(id);
  if (ended_order_.size() > kMostRemembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

AdmittedTransfers::Outcome AdmittedTransfers::outcome(std::uint64_t id) const {
  auto found = ended_.find(id);
  return found == ended_.end() ? Outcome::Unknown : found->second;
}

}  // namespace memwire::detail
