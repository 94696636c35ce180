#include "core/transfer_budget.hpp"

#include <malloc.h>

#include <algorithm>

#include "memwire/error.hpp"
#include "telemetry/telemetry_recorder.hpp"

namespace memwire::detail {

TransferBudget::Account::~Account() {
  release_all(Record::Open);
  release_all(Record::Remembered);
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

std::optional<std::string> TransferBudget::Account::add(Record kind, const std::string* granted) {
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
  if (granted != nullptr) {
    // A granted peer is who its grant says, wherever it connects from: never counted with the
    // shared-token peers of its address, process or user.
    if (kind == Record::Open) {
      if (auto found = budget.per_grantee_.find(*granted);
          found != budget.per_grantee_.end() && found->second >= limits.per_peer)
        return "for one granted peer (max_open_transfers_per_peer " +
               std::to_string(limits.per_peer) + ", '" + *granted + "')";
    }
  } else {
    if (full(budget.per_peer_, peer_, limits.per_peer))
      return "for one peer (max_open_transfers_per_peer " + std::to_string(limits.per_peer) +
             ", from " + peer_ + ")";
    if (user_ && full(budget.per_user_, *user_, limits.per_user))
      return "for one user (max_open_transfers_per_user " + std::to_string(limits.per_user) +
             ", uid " + std::to_string(*user_) + ")";
    if (limits.shared < limits.total && budget.shared_[n] >= limits.shared)
      return "for shared-token peers together (max_open_shared_transfers " +
             std::to_string(limits.shared) +
             "; the rest is kept for granted peers: a grant's token of its own is not counted "
             "here)";
  }
  if (budget.total_[n] >= limits.total)
    return "in total (max_open_transfers " + std::to_string(limits.total) + ")";
  if (granted != nullptr) {
    if (kind == Record::Open) {
      ++budget.per_grantee_[*granted];
      ++granted_open_[*granted];
    } else {
      ++granted_remembered_;
    }
  } else {
    ++budget.per_peer_[peer_][n];
    if (user_) ++budget.per_user_[*user_][n];
    ++budget.shared_[n];
    ++shared_held_[n];
  }
  ++budget.total_[n];
  most_held_[n] = std::max(most_held_[n], ++held_[n]);
  return std::nullopt;
}

void TransferBudget::Account::open(const std::string& granted) {
  if (auto limit = add(Record::Open, granted.empty() ? nullptr : &granted)) {
    if (budget_->telemetry_) budget_->telemetry_->transfer_refused();
    throw Error(ErrorCode::Transport,
                "refused by the owner: over its limit of open tagged transfers " + *limit);
  }
  if (budget_->telemetry_) budget_->telemetry_->transfers_held(1);
}

bool TransferBudget::Account::remember(bool granted) {
  static const std::string kGranted;  // remembered outcomes are not counted per grantee
  return !add(Record::Remembered, granted ? &kGranted : nullptr);
}

void TransferBudget::Account::close(const std::string& granted, std::size_t count) {
  drop(Record::Open, granted.empty() ? nullptr : &granted, count);
}

void TransferBudget::Account::forget(bool granted) {
  static const std::string kGranted;
  drop(Record::Remembered, granted ? &kGranted : nullptr, 1);
}

void TransferBudget::Account::release_all(Record kind) {
  const auto n = index(kind);
  drop(kind, nullptr, shared_held_[n]);
  if (kind == Record::Remembered) {
    static const std::string kGranted;
    return drop(kind, &kGranted, granted_remembered_);
  }
  while (!granted_open_.empty()) {
    const auto name = granted_open_.begin()->first;  // drop() erases the entry it empties
    drop(kind, &name, granted_open_.begin()->second);
  }
}

void TransferBudget::Account::drop(Record kind, const std::string* granted, std::size_t count) {
  const auto n = index(kind);
  // What this connection counted with that credential, at most.
  std::size_t* mine = &shared_held_[n];
  std::unordered_map<std::string, std::size_t>::iterator named;
  if (granted != nullptr && kind == Record::Remembered) mine = &granted_remembered_;
  if (granted != nullptr && kind == Record::Open) {
    named = granted_open_.find(*granted);
    if (named == granted_open_.end()) return;
    mine = &named->second;
  }
  count = std::min(count, *mine);
  if (count == 0) return;
  auto& budget = *budget_;
  {
    std::lock_guard lock(budget.mutex_);
    if (granted == nullptr) {
      const auto less = [&](auto& counts, const auto& key) {
        auto found = counts.find(key);
        if (found == counts.end()) return;
        found->second[n] -= std::min(found->second[n], count);
      };
      less(budget.per_peer_, peer_);
      if (user_) less(budget.per_user_, *user_);
      budget.shared_[n] -= std::min(budget.shared_[n], count);
    } else if (kind == Record::Open) {
      if (auto found = budget.per_grantee_.find(*granted); found != budget.per_grantee_.end()) {
        found->second -= std::min(found->second, count);
        if (found->second == 0) budget.per_grantee_.erase(found);
      }
    }
    budget.total_[n] -= std::min(budget.total_[n], count);
  }
  *mine -= count;
  if (granted != nullptr && kind == Record::Open && *mine == 0) granted_open_.erase(named);
  held_[n] -= count;
  if (kind == Record::Open && budget.telemetry_) budget.telemetry_->transfers_released(count);
}

std::size_t TransferBudget::held(Record kind) const {
  std::lock_guard lock(mutex_);
  return total_[index(kind)];
}

}  // namespace memwire::detail
