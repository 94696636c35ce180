#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "util/ids.hpp"

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
  // Hashed, not ordered: every request looks its key up, among thousands of live registrations
  // (a std::map's 16-byte compares took a fifth of a busy passive side's CPU).
  std::unordered_map<Id128, std::weak_ptr<Registration>, Id128Hash, Id128Equal> live_;
};

}  // namespace memwire::detail
