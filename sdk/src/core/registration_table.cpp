#include "core/registration_table.hpp"

#include <utility>

#include "core/registration.hpp"

namespace memwire::detail {

std::size_t RegistrationTable::probe(const Id128& key) const noexcept {
  const auto mask = slots_.size() - 1;
  auto at = home(key);
  while (slots_[at].used && !Id128Equal{}(slots_[at].key, key)) at = (at + 1) & mask;
  return at;  // at most half the slots are used: a probe always ends
}

void RegistrationTable::resize(std::size_t capacity) {
  auto old = std::exchange(slots_, std::vector<Slot>(capacity));
  for (auto& slot : old)
    if (slot.used) slots_[probe(slot.key)] = std::move(slot);
}

void RegistrationTable::insert(const std::shared_ptr<Registration>& registration) {
  std::lock_guard lock(mutex_);
  if (2 * (used_ + 1) > slots_.size()) resize(2 * slots_.size());
  auto& slot = slots_[probe(registration->key())];
  if (!slot.used) ++used_;
  slot = {registration->key(), registration, true};
}

std::shared_ptr<Registration> RegistrationTable::find(const Id128& key) const {
  std::lock_guard lock(mutex_);
  const auto& slot = slots_[probe(key)];
  return slot.used ? slot.registration.lock() : nullptr;
}

void RegistrationTable::erase(const Id128& key) {
  std::lock_guard lock(mutex_);
  const auto mask = slots_.size() - 1;
  auto hole = probe(key);
  if (!slots_[hole].used) return;
  // Backward shift: a later key of the same run whose home is not inside (hole, its slot] moves
  // into the hole, so that no probe for it meets an empty slot before it.
  for (auto next = (hole + 1) & mask; slots_[next].used; next = (next + 1) & mask) {
    const auto distance_home = (next - home(slots_[next].key)) & mask;
    if (distance_home >= ((next - hole) & mask)) {
      slots_[hole] = std::move(slots_[next]);
      hole = next;
    }
  }
  slots_[hole] = Slot{};
  --used_;
  // Many keys gone (a burst of operations ended): give the memory back.
  if (slots_.size() > kSmallest && 8 * used_ < slots_.size()) resize(slots_.size() / 2);
}

void RegistrationTable::revoke_all() {
  std::vector<std::shared_ptr<Registration>> live;
  {
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_)
      if (slot.used)
        if (auto registration = slot.registration.lock()) live.push_back(std::move(registration));
    slots_ = std::vector<Slot>(kSmallest);
    used_ = 0;
  }
  for (auto& registration : live) registration->abandon();
}

}  // namespace memwire::detail
