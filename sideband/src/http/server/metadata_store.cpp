#include "http/server/metadata_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "memwire/clock.hpp"
#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"

namespace memwire::sideband::http {
namespace {

using json = nlohmann::json;

// Expiries are stored as wall-clock times so that they survive the process; 0 = never.
std::int64_t unix_expiry(const std::optional<MetadataStore::Clock::time_point>& expires) {
  if (!expires) return 0;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(*expires - MetadataStore::Clock::now());
  return unix_now_ms() + std::max<std::int64_t>(left.count(), 1);
}

std::string put_line(const std::string& name, const std::string& document,
                     std::int64_t expires_unix_ms, const std::string& owner) {
  json line{
      {"op", "put"}, {"name", name}, {"document", document}, {"expires_unix_ms", expires_unix_ms}};
  if (!owner.empty()) line["owner"] = owner;
  return line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

MetadataStore::MetadataStore(std::string state_file, Load when)
    : state_file_(std::move(state_file)) {
  if (state_file_.empty()) {
    loaded_ = true;
    return;
  }
  // The operator's own link (the state on another volume) is resolved once, here: its target
  // is what compaction replaces, and the link stays. Nothing later follows a link.
  std::error_code ec;
  if (std::filesystem::is_symlink(state_file_, ec)) {
    const auto target = std::filesystem::weakly_canonical(state_file_, ec);
    if (!ec) state_file_ = target.string();
  }
  if (when == Load::Now) load();
}

void MetadataStore::load() {
  if (loaded()) return;
  auto found = read_state_file();
  {
    std::lock_guard lock(mutex_);
    // Stopped halfway: nothing to serve, and the file stays as it was.
    if (!found.complete) return;
    adopt_locked(std::move(found));
    loaded_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
}

void MetadataStore::adopt_locked(Loaded found) {
  entries_ = std::move(found.entries);
  usage_.clear();
  live_bytes_ = 0;
  for (const auto& [name, entry] : entries_) charge_locked(name, entry);
  // A clean file to append to: no torn tail, no dead records. One that is clean already is
  // appended to as it is (rewriting and syncing 400 MB took seconds of a restart); an empty or
  // missing one is written anew (cheap, and it clears a stale FILE.tmp). Failing a rewrite (a
  // full disk), the log as it is, without its torn tail: changes are saved again as soon as
  // there is room.
  const bool clean = found.records > 0 && !found.torn && found.records == entries_.size();
  if (clean || !compact_locked()) reopen_log_locked(found.whole_bytes, found.records);
}

void MetadataStore::wait_loaded(std::unique_lock<std::mutex>& lock) {
  if (loaded()) return;
  changed_.wait(lock, [&] { return loaded() || stopping_; });
  if (!loaded())
    throw Error(ErrorCode::Transport, "stopping before the state file " + state_file_ + " loaded");
}

void MetadataStore::charge_locked(const std::string& name, const Entry& entry) {
  live_bytes_ += entry.logged;
  auto& held = usage_[entry.owner];
  ++held.names;
  held.bytes += cost(name, entry);
}

void MetadataStore::refund_locked(const std::string& name, const Entry& entry) {
  live_bytes_ -= std::min(live_bytes_, entry.logged);
  auto it = usage_.find(entry.owner);
  if (it == usage_.end()) return;
  it->second.names -= std::min<std::size_t>(it->second.names, 1);
  it->second.bytes -= std::min(it->second.bytes, cost(name, entry));
  if (it->second.names == 0) usage_.erase(it);
}

void MetadataStore::check_quota_locked(const std::string& name, const Entry& entry, Quota quota) {
  if (quota.max_names == 0 && quota.max_bytes == 0) return;
  for (bool swept = false;; swept = true) {
    Usage held;
    if (auto it = usage_.find(entry.owner); it != usage_.end()) held = it->second;
    // Replacing a name of its own frees what the old document held.
    Usage after = held;
    if (auto it = entries_.find(name); it != entries_.end() && it->second.owner == entry.owner) {
      after.names -= 1;
      after.bytes -= cost(name, it->second);
    }
    after.names += 1;
    after.bytes += cost(name, entry);
    const bool names_over = quota.max_names != 0 && after.names > quota.max_names;
    const bool bytes_over = quota.max_bytes != 0 && after.bytes > quota.max_bytes;
    if (!names_over && !bytes_over) return;
    // Expired names not swept yet hold nothing: drop them and count again, once.
    if (!swept && sweep_locked() > 0) continue;
    if (names_over) {
      throw QuotaExceeded(QuotaExceeded::Limit::Names, held.names, quota.max_names,
                          "it holds " + std::to_string(held.names) + " names, the most it may");
    }
    throw QuotaExceeded(QuotaExceeded::Limit::Bytes, held.bytes, quota.max_bytes,
                        "it holds " + std::to_string(held.bytes) + " bytes and this one needs " +
                            std::to_string(cost(name, entry)) + " more, past its most of " +
                            std::to_string(quota.max_bytes));
  }
}

MetadataStore::~MetadataStore() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

bool MetadataStore::live(const Entry& entry, Clock::time_point now) const {
  return !entry.expires || *entry.expires > now;
}

void MetadataStore::put(const std::string& name, std::string document,
                        std::chrono::milliseconds ttl, const std::string& owner, Quota quota) {
  {
    std::unique_lock lock(mutex_);
    wait_loaded(lock);
    Entry entry{std::make_shared<const std::string>(std::move(document)), std::nullopt, owner};
    if (ttl.count() > 0) entry.expires = Clock::now() + ttl;
    check_quota_locked(name, entry, quota);
    entry.logged = log_put_locked(name, entry);  // throws when not saved: the name stays
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      refund_locked(it->first, it->second);
      it->second = std::move(entry);
    } else {
      it = entries_.emplace(name, std::move(entry)).first;
    }
    charge_locked(it->first, it->second);
    compact_if_due_locked();
  }
  changed_.notify_all();
}

std::optional<std::string> MetadataStore::get(const std::string& name) {
  auto document = share(name);
  if (!document) return std::nullopt;
  return *document;
}

std::shared_ptr<const std::string> MetadataStore::share(const std::string& name) {
  std::unique_lock lock(mutex_);
  wait_loaded(lock);
  auto it = entries_.find(name);
  if (it == entries_.end() || !live(it->second, Clock::now())) return nullptr;
  return it->second.document;
}

bool MetadataStore::erase(const std::string& name) {
  std::unique_lock lock(mutex_);
  wait_loaded(lock);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  bool was_live = live(it->second, Clock::now());
  log_erase_locked(name);  // throws when not saved: the name stays
  refund_locked(it->first, it->second);
  entries_.erase(it);
  compact_if_due_locked();
  return was_live;
}

std::vector<std::string> MetadataStore::names() {
  std::unique_lock lock(mutex_);
  wait_loaded(lock);
  std::vector<std::string> out;
  auto now = Clock::now();
  for (const auto& [name, entry] : entries_) {
    if (live(entry, now) && !name.starts_with(kPoolKeyPrefix)) out.push_back(name);
  }
  return out;
}

std::size_t MetadataStore::size() { return names().size(); }

std::pair<std::size_t, std::size_t> MetadataStore::usage(const std::string& owner) {
  std::unique_lock lock(mutex_);
  wait_loaded(lock);
  auto it = usage_.find(owner);
  if (it == usage_.end()) return {0, 0};
  return {it->second.names, it->second.bytes};
}

std::optional<std::string> MetadataStore::wait_for(const std::string& name,
                                                   Clock::time_point deadline) {
  auto document = wait_to_share(name, deadline);
  if (!document) return std::nullopt;
  return *document;
}

std::shared_ptr<const std::string> MetadataStore::wait_to_share(const std::string& name,
                                                                Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  wait_loaded(lock);
  std::shared_ptr<const std::string> found;
  changed_.wait_until(lock, deadline, [&] {
    auto it = entries_.find(name);
    if (it != entries_.end() && live(it->second, Clock::now())) found = it->second.document;
    return found != nullptr || stopping_;
  });
  return found;
}

std::size_t MetadataStore::sweep() {
  if (!loaded()) return 0;
  std::lock_guard lock(mutex_);
  return sweep_locked();
}

std::size_t MetadataStore::sweep_locked() {
  auto now = Clock::now();
  // Expired names need no record: their expiry is in the log, and a load skips them.
  return std::erase_if(entries_, [&](const auto& kv) {
    if (live(kv.second, now)) return false;
    refund_locked(kv.first, kv.second);
    return true;
  });
}

void MetadataStore::stop() {
  abandon_load_ = true;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

void MetadataStore::append_locked(const std::string& line) {
  if (state_file_.empty()) return;
  // Closed after an append that could not be undone: only a whole rewrite is safe to go on.
  if (log_fd_ < 0 && !compact_locked())
    throw Error(ErrorCode::Transport,
                "not saved: the state file " + state_file_ + " cannot be written (see stderr)");
  if (!write_all(log_fd_, line)) {
    const int error = errno;
    // Part of a line would run into the next record: cut it off, or stop appending.
    if (::ftruncate(log_fd_, static_cast<off_t>(log_bytes_)) != 0) {
      ::close(log_fd_);
      log_fd_ = -1;
    }
    const std::string why =
        "cannot append to state file " + state_file_ + ": " + std::strerror(error);
    std::cerr << "memwire: " << why << "\n";
    throw Error(ErrorCode::Transport, "not saved: " + why);
  }
  log_bytes_ += line.size();
  ++log_records_;
}

void MetadataStore::compact_if_due_locked() {
  if (log_fd_ < 0) return;
  // Many lines for few names, or many bytes for few live ones (a large document republished,
  // or put and erased, again and again): a rewrite costs what is live, and it comes only after
  // at least as much again was appended.
  const bool many_records = log_records_ > kCompactAfter && log_records_ > 2 * entries_.size();
  const bool many_bytes = log_bytes_ > 2 * live_bytes_ + kCompactSlackBytes;
  if (many_records || many_bytes) compact_locked();
}

void MetadataStore::reopen_log_locked(std::uint64_t whole_bytes, std::size_t records) {
  log_fd_ =
      ::open(state_file_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (log_fd_ >= 0 && ::ftruncate(log_fd_, static_cast<off_t>(whole_bytes)) != 0) {
    ::close(log_fd_);
    log_fd_ = -1;
  }
  if (log_fd_ < 0) {
    std::cerr << "memwire: cannot open state file " << state_file_ << ": " << std::strerror(errno)
              << "\n";
    return;
  }
  log_bytes_ = whole_bytes;
  log_records_ = records;
}

std::uint64_t MetadataStore::log_put_locked(const std::string& name, const Entry& entry) {
  if (state_file_.empty()) return 0;
  const auto line = put_line(name, *entry.document, unix_expiry(entry.expires), entry.owner);
  append_locked(line);
  return line.size();
}

void MetadataStore::log_erase_locked(const std::string& name) {
  if (state_file_.empty()) return;
  append_locked(
      json{{"op", "erase"}, {"name", name}}.dump(-1, ' ', false, json::error_handler_t::replace) +
      "\n");
}

bool MetadataStore::compact_locked() {
  // Written aside, synced, renamed over: a crash leaves the old log or the new one, whole.
  // A file (or a planted link) left at the temporary name is removed, never followed: the new
  // log is a file this process creates.
  std::string temp = state_file_ + ".tmp";
  if (::unlink(temp.c_str()) != 0 && errno != ENOENT)
    std::cerr << "memwire: cannot remove " << temp << ": " << std::strerror(errno) << "\n";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::cerr << "memwire: cannot write state file " << temp << ": " << std::strerror(errno)
              << "\n";
    return false;
  }
  auto now = Clock::now();
  std::string text;
  std::size_t records = 0;
  // What each entry's line will be once the new log is in place (expired ones: none).
  std::vector<std::uint64_t> logged;
  logged.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) {
    if (!live(entry, now)) {
      logged.push_back(0);
      continue;
    }
    const auto before = text.size();
    text += put_line(name, *entry.document, unix_expiry(entry.expires), entry.owner);
    logged.push_back(text.size() - before);
    ++records;
  }
  bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  std::error_code ec;
  if (ok) std::filesystem::rename(temp, state_file_, ec);
  if (!ok || ec) {
    std::cerr << "memwire: cannot replace state file " << state_file_ << ": "
              << (ok ? ec.message() : std::strerror(error)) << "\n";
    std::filesystem::remove(temp, ec);
    return false;
  }
  if (log_fd_ >= 0) ::close(log_fd_);
  log_fd_ = ::open(state_file_.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (log_fd_ < 0) {
    std::cerr << "memwire: cannot open state file " << state_file_ << ": " << std::strerror(errno)
              << "\n";
    return false;
  }
  log_bytes_ = text.size();
  log_records_ = records;
  auto next = logged.begin();
  for (auto& [name, entry] : entries_) entry.logged = *next++;
  live_bytes_ = text.size();
  return true;
}

MetadataStore::Loaded MetadataStore::read_state_file() {
  Loaded found;
  std::ifstream in(state_file_, std::ios::binary);
  if (!in) {
    found.complete = true;
    return found;
  }
  // name -> the record the log leaves it with.
  struct Record {
    std::string document;
    std::int64_t expires_unix_ms = 0;
    std::string owner;
    std::uint64_t line_bytes = 0;  // its line in the log (0: from the earlier format)
  };
  std::map<std::string, Record> latest;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    if (abandon_load_.load(std::memory_order_relaxed)) return found;
    ++number;
    bool whole = !in.eof();  // the last line without its newline may be torn
    if (whole) {
      found.whole_bytes += line.size() + 1;
      ++found.records;
    } else {
      found.torn = true;
    }
    auto record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    // The file of the earlier format: one object {"version": 1, "names": {...}}.
    if (number == 1 && record.is_object() && record.contains("names") &&
        record["names"].is_object()) {
      for (const auto& [name, value] : record["names"].items()) {
        if (value.is_object() && value.contains("document") && value["document"].is_string() &&
            value.contains("expires_unix_ms") && value["expires_unix_ms"].is_number_integer()) {
          latest[name] = {value["document"].get<std::string>(),
                          value["expires_unix_ms"].get<std::int64_t>(),
                          {}};
        }
      }
      continue;
    }
    bool put = record.is_object() && record.value("op", "") == "put" && record.contains("name") &&
               record["name"].is_string() && record.contains("document") &&
               record["document"].is_string() && record.contains("expires_unix_ms") &&
               record["expires_unix_ms"].is_number_integer() &&
               (!record.contains("owner") || record["owner"].is_string());
    bool erase = record.is_object() && record.value("op", "") == "erase" &&
                 record.contains("name") && record["name"].is_string();
    if (put) {
      latest[record["name"].get<std::string>()] = {
          std::move(record["document"].get_ref<std::string&>()),
          record["expires_unix_ms"].get<std::int64_t>(), record.value("owner", ""),
          whole ? line.size() + 1 : 0};
    } else if (erase) {
      latest.erase(record["name"].get<std::string>());
    } else if (whole) {
      std::cerr << "memwire: state file " << state_file_ << ": skipping unreadable line " << number
                << "\n";
    }  // else: a torn last record, from a crash halfway through an append
  }
  auto now = Clock::now();
  auto unix_now = unix_now_ms();
  for (auto& [name, value] : latest) {
    if (abandon_load_.load(std::memory_order_relaxed)) return found;
    if (value.expires_unix_ms != 0 && value.expires_unix_ms <= unix_now) continue;
    try {
      // Only documents that still parse come back.
      if (name.starts_with(kPoolKeyPrefix))
        PoolMetadata::from_json(value.document);
      else
        RdmaMetadata::from_json(value.document);
    } catch (const std::exception& e) {
      std::cerr << "memwire: state file " << state_file_ << ": skipping '" << name
                << "': " << e.what() << "\n";
      continue;
    }
    Entry entry{std::make_shared<const std::string>(std::move(value.document)), std::nullopt,
                std::move(value.owner), value.line_bytes};
    // A file from elsewhere may say anything: past 10 years, now + left would near overflow.
    constexpr std::int64_t kLongestLeftMs = 3650LL * 24 * 3600 * 1000;
    if (value.expires_unix_ms != 0) {
      entry.expires = now + std::chrono::milliseconds(
                                std::min(value.expires_unix_ms - unix_now, kLongestLeftMs));
    }
    found.entries.emplace(name, std::move(entry));
  }
  found.complete = true;
  return found;
}

}  // namespace memwire::sideband::http
