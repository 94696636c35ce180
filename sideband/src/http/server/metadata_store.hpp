#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memwire::sideband::http {

// Names -> metadata documents (already checked), each with an optional expiry. Waiters block on
// a condition variable until a name appears; stop() releases them all.
class MetadataStore {
 public:
  using Clock = std::chrono::steady_clock;

  // Pools' metadata lives here too, under "=pool.NAME": '=' is in no name, so a pool and an
  // operation may share a name. names() and size() count operations only; a loaded pool entry
  // must parse as PoolMetadata, any other as RdmaMetadata.
  static constexpr std::string_view kPoolKeyPrefix = "=pool.";
  static std::string pool_key(std::string_view name) {
    return std::string(kPoolKeyPrefix) + std::string(name);
  }

  // Loads `state_file` when it exists (entries that are expired or do not parse are skipped,
  // and so is a torn last record) and appends one line per change to it afterwards. Empty =
  // memory only.
  //
  // The file is a log of JSON lines, {"op":"put","name","document","expires_unix_ms"} or
  // {"op":"erase","name"}: a change costs one append, however many names there are (a rewrite
  // of the whole file per change cost 18 ms at 4k names). When the log holds more than twice
  // the live names (and at least kCompactAfter lines) it is rewritten aside and renamed over,
  // so it stays proportional to the names. Appends are not fsync'ed: a crashed process loses
  // nothing; a crashed machine may lose the last changes (at worst a torn last line). A change
  // the log did not take (a full disk) is not made: put() and erase() throw memwire::Error
  // (Transport), and the log is cut back to its last whole line.
  static constexpr std::size_t kCompactAfter = 1024;
  explicit MetadataStore(std::string state_file = {});
  ~MetadataStore();
  MetadataStore(const MetadataStore&) = delete;
  MetadataStore& operator=(const MetadataStore&) = delete;

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
  // Appends a change to the state file before it is made; throws when the file did not take
  // it whole (what was written of it is cut off again).
  void append_locked(const std::string& line);
  void log_put_locked(const std::string& name, const Entry& entry);
  void log_erase_locked(const std::string& name);
  void compact_if_due_locked();
  // Rewrites the log as one put per live name and opens it for appending; false (reported on
  // stderr) when that failed, and then the log open before, if any, stays as it was.
  bool compact_locked();
  // Opens the existing log for appending, cut to its `whole_bytes` of whole lines.
  void reopen_log_locked(std::uint64_t whole_bytes, std::size_t records);
  // Loads the file; the length of its whole lines and their count.
  std::pair<std::uint64_t, std::size_t> load();

  std::string state_file_;
  int log_fd_ = -1;              // the state file, open for appending
  std::uint64_t log_bytes_ = 0;  // its length: a failed append is cut back to it
  std::size_t log_records_ = 0;  // lines in it
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Entry> entries_;
  bool stopping_ = false;
};

}  // namespace memwire::sideband::http
