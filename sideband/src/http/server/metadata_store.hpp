#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memwire::sideband::http {

// What one owner (a grant's token) may hold: names and bytes (each name's length plus its
// document's). 0 = no limit.
struct Quota {
  std::size_t max_names = 0;
  std::size_t max_bytes = 0;
};

// A put that would take its owner past its Quota; nothing was stored.
struct QuotaExceeded : std::runtime_error {
  enum class Limit { Names, Bytes };
  QuotaExceeded(Limit limit, std::size_t used, std::size_t max, const std::string& message)
      : std::runtime_error(message), limit(limit), used(used), max(max) {}
  Limit limit;
  std::size_t used;  // before the put
  std::size_t max;
};

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
  // the live names (and at least kCompactAfter lines), or more than twice the bytes of the live
  // names' lines (and kCompactSlackBytes more), it is rewritten aside and renamed over, so it
  // stays proportional to what is live whatever the pattern of changes (one 1 MiB name
  // republished 300 times grew it to 301 MiB when only the line count was watched). Appends are not
  // fsync'ed: a crashed process loses nothing; a crashed machine may lose the last changes (at
  // worst a torn last line). A change the log did not take (a full disk) is not made: put() and
  // erase() throw memwire::Error (Transport), and the log is cut back to its last whole line.
  //
  // Each entry records its owner (an opaque id, "" for none), in the log too, so that what an
  // owner holds is known again after a restart and put() can hold it to a Quota.
  //
  // With Load::Later the constructor reads nothing: load() (on a thread of the caller's) reads
  // the file, and until it is done every call but loaded(), sweep() and stop() waits for it. A
  // registry restarted over a large file so answers its health check at once.
  static constexpr std::size_t kCompactAfter = 1024;
  static constexpr std::uint64_t kCompactSlackBytes = 64 << 10;
  enum class Load { Now, Later };
  explicit MetadataStore(std::string state_file = {}, Load when = Load::Now);
  ~MetadataStore();
  MetadataStore(const MetadataStore&) = delete;
  MetadataStore& operator=(const MetadataStore&) = delete;

  // Reads the state file (Load::Later); returns early, loading nothing, when stop() is called
  // meanwhile. Call it once.
  void load();
  bool loaded() const noexcept { return loaded_.load(std::memory_order_acquire); }

  // Stores `document` under `name` for `owner`. Replacing a name counts its new size only, and
  // moves it to `owner`. Throws QuotaExceeded when the owner would hold more than `quota`.
  void put(const std::string& name, std::string document, std::chrono::milliseconds ttl,
           const std::string& owner = {}, Quota quota = {});
  std::optional<std::string> get(const std::string& name);
  // The document under `name` itself, never changed (a put replaces it): an answer sends it
  // without a copy of its own. Null when there is none.
  std::shared_ptr<const std::string> share(const std::string& name);
  bool erase(const std::string& name);
  std::vector<std::string> names();
  std::size_t size();
  // What `owner` holds now: names and bytes (as Quota counts them).
  std::pair<std::size_t, std::size_t> usage(const std::string& owner);

  // Waits until `name` is present, the deadline passes or stop() is called.
  std::optional<std::string> wait_for(const std::string& name, Clock::time_point deadline);
  // The same, sharing the document (as share()); null when the wait ended without it.
  std::shared_ptr<const std::string> wait_to_share(const std::string& name,
                                                   Clock::time_point deadline);

  // Drops expired names; returns how many.
  std::size_t sweep();
  void stop();

 private:
  struct Entry {
    std::shared_ptr<const std::string> document;  // never null
    std::optional<Clock::time_point> expires;
    std::string owner;
    std::uint64_t logged = 0;  // the length of its put line in the log (0: none there)
  };
  struct Usage {
    std::size_t names = 0;
    std::size_t bytes = 0;
  };
  static std::size_t cost(const std::string& name, const Entry& entry) {
    return name.size() + entry.document->size();
  }
  bool live(const Entry& entry, Clock::time_point now) const;
  // Blocks until load() is done; throws Error{Transport} when stop() came first.
  void wait_loaded(std::unique_lock<std::mutex>& lock);
  void charge_locked(const std::string& name, const Entry& entry);
  void refund_locked(const std::string& name, const Entry& entry);
  // Throws QuotaExceeded when `entry` under `name` would take its owner past `quota`.
  void check_quota_locked(const std::string& name, const Entry& entry, Quota quota);
  std::size_t sweep_locked();
  // Appends a change to the state file before it is made; throws when the file did not take
  // it whole (what was written of it is cut off again).
  void append_locked(const std::string& line);
  // Appends `entry`'s put line; returns its length (0 without a state file).
  std::uint64_t log_put_locked(const std::string& name, const Entry& entry);
  void log_erase_locked(const std::string& name);
  void compact_if_due_locked();
  // Rewrites the log as one put per live name and opens it for appending; false (reported on
  // stderr) when that failed, and then the log open before, if any, stays as it was.
  bool compact_locked();
  // Opens the existing log for appending, cut to its `whole_bytes` of whole lines.
  void reopen_log_locked(std::uint64_t whole_bytes, std::size_t records);
  struct Loaded {
    std::map<std::string, Entry> entries;
    std::uint64_t whole_bytes = 0;  // the length of its whole lines
    std::size_t records = 0;        // their count
    bool torn = false;              // a last line without its newline
    bool complete = false;          // false: stop() came first
  };
  // Reads the file, without the lock.
  Loaded read_state_file();
  // Takes in what read_state_file() found and opens the log.
  void adopt_locked(Loaded loaded);

  std::string state_file_;
  int log_fd_ = -1;               // the state file, open for appending
  std::uint64_t log_bytes_ = 0;   // its length: a failed append is cut back to it
  std::size_t log_records_ = 0;   // lines in it
  std::uint64_t live_bytes_ = 0;  // the lines of entries_ in it (their `logged`, summed)
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, Usage> usage_;  // by owner
  bool stopping_ = false;
  std::atomic<bool> loaded_{false};
  std::atomic<bool> abandon_load_{false};
};

}  // namespace memwire::sideband::http
