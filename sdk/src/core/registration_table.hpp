#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

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
  // Every request looks its key up, among thousands of live registrations: open addressing
  // (linear probing) keeps the key beside its registration, one cache miss to find it. A
  // node-based hash map took three (bucket, the node before, the node): a third of a busy
  // owner's event loop with 64 small READs in flight (perf). A std::map before it, with its
  // 16-byte compares, a fifth.
  struct Slot {
    Id128 key{};
    std::weak_ptr<Registration> registration;
    bool used = false;
  };
  static constexpr std::size_t kSmallest = 64;  // slots, a power of two
  std::size_t home(const Id128& key) const noexcept {
    return Id128Hash{}(key) & (slots_.size() - 1);
  }
  // The slot holding `key`, or the empty one where a probe for it ends. mutex_ held.
  std::size_t probe(const Id128& key) const noexcept;
  // Rehashes into `capacity` slots (a power of two, at least twice the live count). mutex_ held.
  void resize(std::size_t capacity);

  mutable std::mutex mutex_;
  std::vector<Slot> slots_ = std::vector<Slot>(kSmallest);
  std::size_t used_ = 0;
};

}  // namespace memwire::detail
