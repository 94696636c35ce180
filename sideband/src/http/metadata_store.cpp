#include "http/metadata_store.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "memwire/metadata.hpp"

namespace memwire::sideband::http {
namespace {

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

MetadataStore::MetadataStore(std::string state_file) : state_file_(std::move(state_file)) {
  if (!state_file_.empty()) load();
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
    entries_[name] = std::move(entry);
    save_locked();
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
  entries_.erase(it);
  save_locked();
  return was_live;
}

std::vector<std::string> MetadataStore::names() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  auto now = Clock::now();
  for (const auto& [name, entry] : entries_) {
    if (live(entry, now)) out.push_back(name);
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
  std::size_t dropped =
      std::erase_if(entries_, [&](const auto& kv) { return !live(kv.second, now); });
  if (dropped > 0) save_locked();
  return dropped;
}

void MetadataStore::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

void MetadataStore::save_locked() {
  if (state_file_.empty()) return;
  // Expiries are stored as wall-clock times so that they survive the process.
  nlohmann::json names = nlohmann::json::object();
  auto now = Clock::now();
  auto unix_now = unix_ms_now();
  for (const auto& [name, entry] : entries_) {
    if (!live(entry, now)) continue;
    std::int64_t expires = 0;
    if (entry.expires) {
      expires = unix_now +
                std::chrono::duration_cast<std::chrono::milliseconds>(*entry.expires - now).count();
    }
    names[name] = {{"document", entry.document}, {"expires_unix_ms", expires}};
  }
  // Write aside and rename, so that a crash never leaves half a file.
  std::string temp = state_file_ + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << nlohmann::json{{"version", 1}, {"names", names}}.dump();
    if (!out) {
      std::cerr << "memwire: cannot write state file " << temp << "\n";
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, state_file_, ec);
  if (ec)
    std::cerr << "memwire: cannot replace state file " << state_file_ << ": " << ec.message()
              << "\n";
}

void MetadataStore::load() {
  std::ifstream in(state_file_);
  if (!in) return;
  auto state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("names") || !state["names"].is_object()) {
    std::cerr << "memwire: ignoring unreadable state file " << state_file_ << "\n";
    return;
  }
  auto now = Clock::now();
  auto unix_now = unix_ms_now();
  for (const auto& [name, value] : state["names"].items()) {
    try {
      auto document = value.at("document").get<std::string>();
      RdmaMetadata::from_json(document);  // only documents that still parse come back
      auto expires = value.at("expires_unix_ms").get<std::int64_t>();
      Entry entry{std::move(document), std::nullopt};
      if (expires != 0) {
        if (expires <= unix_now) continue;
        entry.expires = now + std::chrono::milliseconds(expires - unix_now);
      }
      entries_[name] = std::move(entry);
    } catch (const std::exception& e) {
      std::cerr << "memwire: state file " << state_file_ << ": skipping an entry: " << e.what()
                << "\n";
    }
  }
}

}  // namespace memwire::sideband::http
