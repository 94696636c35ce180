#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace memwire::sideband::http {

// Names -> metadata documents (already checked), each with an optional expiry. Waiters block on
// a condition variable until a name appears; stop() releases them all.
class MetadataStore {
 public:
  using Clock = std::chrono::steady_clock;

  // Loads `state_file` when it exists (entries that are expired or do not parse are skipped)
  // and rewrites it after every change. Empty = memory only.
  explicit MetadataStore(std::string state_file = {});

  void put(const std::string& name, std::string document, std::chrono::milliseconds ttl);
  std::optional<std::string> get(const std::string& name);
  bool erase(const std::string& name);
  std::vector<std::string> names();
  std::size_t size();

  // Waits until `name` is present, the deadline passes or stop() is called.
  std::optional<std::string> wait_for(const std::string& name, Clock::time_point deadline);

  // Drops expired names; returns how many.
  std::size_t sweep();
  void stop();

 private:
  struct Entry {
    std::string document;
    std::optional<Clock::time_point> expires;
  };
  bool live(const Entry& entry, Clock::time_point now) const;
  void save_locked();  // rewrites the state file; errors are reported, never thrown
  void load();

  std::string state_file_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Entry> entries_;
  bool stopping_ = false;
};

}  // namespace memwire::sideband::http
