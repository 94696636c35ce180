#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "ids.hpp"

namespace memwire::detail {

class Registration;

// Live passive operations of one connector, by notification key.
class RegistrationTable {
 public:
  void insert(const std::shared_ptr<Registration>& registration);
  std::shared_ptr<Registration> find(const Id128& key) const;
  void erase(const Id128& key);
  // Revokes everything still live: the connector is going away.
  void revoke_all();

 private:
  mutable std::mutex mutex_;
  std::map<Id128, std::weak_ptr<Registration>> live_;
};

}  // namespace memwire::detail
