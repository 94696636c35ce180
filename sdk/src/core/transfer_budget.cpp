#include "core/transfer_budget.hpp"

#include <malloc.h>

#include <algorithm>

#include "memwire/error.hpp"
#include "telemetry/telemetry_recorder.hpp"

namespace memwire::detail {

TransferBudget::Account::~Account() {
  release(Record::Open, held_[0]);
  release(Record::Remembered, held_[1]);
  {
    // The entries of a peer and a user go with the last connection that emptied them, not with
    // every record: a transfer at a time would otherwise insert and erase a node (its key a
    // copied string) at each step.
    std::lock_guard lock(budget_->mutex_);
    const auto forget_if_empty = [](auto& counts, const auto& key) {
      auto found = counts.find(key);
      if (found != counts.end() && found->second == Counts{}) counts.erase(found);
    };
    forget_if_empty(budget_->per_peer_, peer_);
    if (user_) forget_if_empty(budget_->per_user_, *user_);
  }
  budget_->closed(most_held_[0] + most_held_[1]);
}

void TransferBudget::closed(std::size_t most) {
  std::lock_guard lock(mutex_);
  freed_since_trim_ += most;
}

void TransferBudget::trim_if_due() {
  {
    std::lock_guard lock(mutex_);
    // Also once the last record went: what a wave of peers left is not kept for the next one.
    if (freed_since_trim_ < kTrimAfter && (freed_since_trim_ == 0 || total_ != Counts{})) return;
    freed_since_trim_ = 0;
  }
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

std::optional<std::string> TransferBudget::Account::add(Record kind) {
  auto& budget = *budget_;
  const auto& limits = budget.limits_;
  const auto n = index(kind);
  std::lock_guard lock(budget.mutex_);
  const auto full = [&](const auto& counts, const auto& key, std::size_t limit) {
    auto found = counts.find(key);
    return found != counts.end() && found->second[n] >= limit;
  };
  if (held_[n] >= limits.per_connection)
    return "on one connection (max_open_transfers_per_connection " +
           std::to_string(limits.per_connection) + ")";
  if (full(budget.per_peer_, peer_, limits.per_peer))
    return "for one peer (max_open_transfers_per_peer " + std::to_string(limits.per_peer) +
           ", from " + peer_ + ")";
  if (user_ && full(budget.per_user_, *user_, limits.per_user))
    return "for one user (max_open_transfers_per_user " + std::to_string(limits.per_user) +
           ", uid " + std::to_string(*user_) + ")";
  if (budget.total_[n] >= limits.total)
    return "in total (max_open_transfers " + std::to_string(limits.total) + ")";
  ++budget.per_peer_[peer_][n];
  if (user_) ++budget.per_user_[*user_][n];
  ++budget.total_[n];
  most_held_[n] = std::max(most_held_[n], ++held_[n]);
  return std::nullopt;
}

void TransferBudget::Account::open() {
  if (auto limit = add(Record::Open)) {
    if (budget_->telemetry_) budget_->telemetry_->transfer_refused();
    throw Error(ErrorCode::Transport,
                "refused by the owner: over its limit of open tagged transfers " + *limit);
  }
  if (budget_->telemetry_) budget_->telemetry_->transfers_held(1);
}

bool TransferBudget::Account::remember() { return !add(Record::Remembered); }

void TransferBudget::Account::release(Record kind, std::size_t count) {
  const auto n = index(kind);
  count = std::min(count, held_[n]);
  if (count == 0) return;
  auto& budget = *budget_;
  {
    std::lock_guard lock(budget.mutex_);
    const auto drop = [&](auto& counts, const auto& key) {
      auto found = counts.find(key);
      if (found == counts.end()) return;
      found->second[n] -= std::min(found->second[n], count);
    };
    drop(budget.per_peer_, peer_);
    if (user_) drop(budget.per_user_, *user_);
    budget.total_[n] -= std::min(budget.total_[n], count);
  }
  held_[n] -= count;
  if (kind == Record::Open && budget.telemetry_) budget.telemetry_->transfers_released(count);
}

std::size_t TransferBudget::held(Record kind) const {
  std::lock_guard lock(mutex_);
  return total_[index(kind)];
}

}  // namespace memwire::detail
