#include "core/registration_table.hpp"

#include <vector>

#include "core/registration.hpp"

namespace memwire::detail {

void RegistrationTable::insert(const std::shared_ptr<Registration>& registration) {
  std::lock_guard lock(mutex_);
  live_[registration->key()] = registration;
}

std::shared_ptr<Registration> RegistrationTable::find(const Id128& key) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(key);
  return it == live_.end() ? nullptr : it->second.lock();
}

void RegistrationTable::erase(const Id128& key) {
  std::lock_guard lock(mutex_);
  live_.erase(key);
}

void RegistrationTable::revoke_all() {
  std::vector<std::shared_ptr<Registration>> live;
  {
    std::lock_guard lock(mutex_);
    for (auto& [key, weak] : live_)
      if (auto registration = weak.lock()) live.push_back(std::move(registration));
    live_.clear();
  }
  for (auto& registration : live) registration->abandon();
}

}  // namespace memwire::detail
