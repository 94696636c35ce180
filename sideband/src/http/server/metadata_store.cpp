#include "http/server/metadata_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "memwire/clock.hpp"
#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool.hpp"

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
                     std::int64_t expires_unix_ms) {
  return json{{"op", "put"},
              {"name", name},
              {"document", document},
              {"expires_unix_ms", expires_unix_ms}}
             .dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n";
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

MetadataStore::MetadataStore(std::string state_file) : state_file_(std::move(state_file)) {
  if (state_file_.empty()) return;
  // The operator's own link (the state on another volume) is resolved once, here: its target
  // is what compaction replaces, and the link stays. Nothing later follows a link.
  std::error_code ec;
  if (std::filesystem::is_symlink(state_file_, ec)) {
    const auto target = std::filesystem::weakly_canonical(state_file_, ec);
    if (!ec) state_file_ = target.string();
  }
  std::lock_guard lock(mutex_);
  const auto [whole_bytes, records] = load();
  // A clean file to append to: no torn tail, no dead records. Failing that (a full disk), the
  // log as it is, without its torn tail: changes are saved again as soon as there is room.
  if (!compact_locked()) reopen_log_locked(whole_bytes, records);
}

MetadataStore::~MetadataStore() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

bool MetadataStore::live(const Entry& entry, Clock::time_point now) const {
  return !entry.expires || *entry.expires > now;
}

void MetadataStore::put(const std::string& name, std::string document,
                        std::chrono::milliseconds ttl) {
  {
    std::lock_guard lock(mutex_);
    Entry entry{std::move(document), std::nullopt};
    if (ttl.count() > 0) entry.expires = Clock::now() + ttl;
    log_put_locked(name, entry);  // throws when not saved: the name stays as it was
    entries_[name] = std::move(entry);
    compact_if_due_locked();
  }
  changed_.notify_all();
}

std::optional<std::string> MetadataStore::get(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end() || !live(it->second, Clock::now())) return std::nullopt;
  return it->second.document;
}

bool MetadataStore::erase(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  bool was_live = live(it->second, Clock::now());
  log_erase_locked(name);  // throws when not saved: the name stays
  entries_.erase(it);
  compact_if_due_locked();
  return was_live;
}

std::vector<std::string> MetadataStore::names() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  auto now = Clock::now();
  for (const auto& [name, entry] : entries_) {
    if (live(entry, now) && !name.starts_with(kPoolKeyPrefix)) out.push_back(name);
  }
  return out;
}

std::size_t MetadataStore::size() { return names().size(); }

std::optional<std::string> MetadataStore::wait_for(const std::string& name,
                                                   Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  std::optional<std::string> found;
  changed_.wait_until(lock, deadline, [&] {
    auto it = entries_.find(name);
    if (it != entries_.end() && live(it->second, Clock::now())) found = it->second.document;
    return found.has_value() || stopping_;
  });
  return found;
}

std::size_t MetadataStore::sweep() {
  std::lock_guard lock(mutex_);
  auto now = Clock::now();
  // Expired names need no record: their expiry is in the log, and a load skips them.
  return std::erase_if(entries_, [&](const auto& kv) { return !live(kv.second, now); });
}

void MetadataStore::stop() {
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
  if (log_fd_ >= 0 && log_records_ > kCompactAfter && log_records_ > 2 * entries_.size())
    compact_locked();
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

void MetadataStore::log_put_locked(const std::string& name, const Entry& entry) {
  if (state_file_.empty()) return;
  append_locked(put_line(name, entry.document, unix_expiry(entry.expires)));
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
  for (const auto& [name, entry] : entries_) {
    if (!live(entry, now)) continue;
    text += put_line(name, entry.document, unix_expiry(entry.expires));
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
  return true;
}

std::pair<std::uint64_t, std::size_t> MetadataStore::load() {
  std::uint64_t whole_bytes = 0;
  std::size_t whole_lines = 0;
  std::ifstream in(state_file_, std::ios::binary);
  if (!in) return {whole_bytes, whole_lines};
  // name -> (document, expires_unix_ms), as the log leaves them.
  std::map<std::string, std::pair<std::string, std::int64_t>> latest;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    bool whole = !in.eof();  // the last line without its newline may be torn
    if (whole) {
      whole_bytes += line.size() + 1;
      ++whole_lines;
    }
    auto record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    // The file of the earlier format: one object {"version": 1, "names": {...}}.
    if (number == 1 && record.is_object() && record.contains("names") &&
        record["names"].is_object()) {
      for (const auto& [name, value] : record["names"].items()) {
        if (value.is_object() && value.contains("document") && value["document"].is_string() &&
            value.contains("expires_unix_ms") && value["expires_unix_ms"].is_number_integer()) {
          latest[name] = {value["document"].get<std::string>(),
                          value["expires_unix_ms"].get<std::int64_t>()};
        }
      }
      continue;
    }
    bool put = record.is_object() && record.value("op", "") == "put" && record.contains("name") &&
               record["name"].is_string() && record.contains("document") &&
               record["document"].is_string() && record.contains("expires_unix_ms") &&
               record["expires_unix_ms"].is_number_integer();
    bool erase = record.is_object() && record.value("op", "") == "erase" &&
                 record.contains("name") && record["name"].is_string();
    if (put) {
      latest[record["name"].get<std::string>()] = {record["document"].get<std::string>(),
                                                   record["expires_unix_ms"].get<std::int64_t>()};
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
    auto& [document, expires] = value;
    if (expires != 0 && expires <= unix_now) continue;
    try {
      // Only documents that still parse come back.
      if (name.starts_with(kPoolKeyPrefix))
        PoolMetadata::from_json(document);
      else
        RdmaMetadata::from_json(document);
    } catch (const std::exception& e) {
      std::cerr << "memwire: state file " << state_file_ << ": skipping '" << name
                << "': " << e.what() << "\n";
      continue;
    }
    Entry entry{std::move(document), std::nullopt};
    // A file from elsewhere may say anything: past 10 years, now + left would near overflow.
    constexpr std::int64_t kLongestLeftMs = 3650LL * 24 * 3600 * 1000;
    if (expires != 0)
      entry.expires = now + std::chrono::milliseconds(std::min(expires - unix_now, kLongestLeftMs));
    entries_[name] = std::move(entry);
  }
  return {whole_bytes, whole_lines};
}

}  // namespace memwire::sideband::http
