#include "http/server/request_broker.hpp"

#include <algorithm>
#include <cstdio>

namespace memwire::sideband::http {
namespace {

bool serves(const std::string& prefix, const std::string& name) {
  if (prefix.empty() || prefix == name) return true;
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         name[prefix.size()] == '.';
}

}  // namespace

std::string RequestBroker::new_id() {
  char buffer[33];
  std::snprintf(buffer, sizeof buffer, "%016llx%016llx", static_cast<unsigned long long>(random_()),
                static_cast<unsigned long long>(random_()));
  return buffer;
}

bool RequestBroker::live(const Server& server, Clock::time_point now) const {
  return server.polling > 0 || now - server.last_seen < kServerLease;
}

std::optional<std::string> RequestBroker::prefix_for(const std::string& name,
                                                     Clock::time_point now) const {
  std::optional<std::string> best;
  for (const auto& [id, server] : servers_) {
    if (!live(server, now) || !serves(server.prefix, name)) continue;
    if (!best || server.prefix.size() > best->size()) best = server.prefix;
  }
  return best;
}

std::string RequestBroker::add_server(std::string prefix, std::string owner) {
  std::lock_guard lock(mutex_);
  auto id = new_id();
  servers_[id] = Server{std::move(prefix), std::move(owner), Clock::now(), 0};
  return id;
}

std::optional<std::string> RequestBroker::server_owner(const std::string& server_id) {
  std::lock_guard lock(mutex_);
  auto it = servers_.find(server_id);
  if (it == servers_.end()) return std::nullopt;
  return it->second.owner;
}

std::optional<std::string> RequestBroker::request_owner(const std::string& request_id) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(request_id);
  if (it == pending_.end() || it->second.state != State::Taken) return std::nullopt;
  return it->second.taken_by;
}

bool RequestBroker::remove_server(const std::string& server_id) {
  bool removed;
  {
    std::lock_guard lock(mutex_);
    removed = servers_.erase(server_id) > 0;
    if (removed) fail_orphans_locked(Clock::now());
  }
  changed_.notify_all();
  return removed;
}

std::optional<std::vector<RequestBroker::Request>> RequestBroker::poll(const std::string& server_id,
                                                                       Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  auto it = servers_.find(server_id);
  if (it == servers_.end()) return std::nullopt;
  it->second.polling++;
  std::string prefix = it->second.prefix;
  std::optional<std::vector<Request>> out = std::vector<Request>{};
  changed_.wait_until(lock, deadline, [&] {
    if (stopping_ || !servers_.contains(server_id)) return true;
    return !queues_[prefix].empty();
  });
  it = servers_.find(server_id);
  if (it == servers_.end()) return std::nullopt;
  it->second.polling--;
  it->second.last_seen = Clock::now();
  auto& queue = queues_[prefix];
  if (!stopping_ && !queue.empty()) {
    auto id = queue.front();
    queue.pop_front();
    auto& pending = pending_.at(id);
    pending.state = State::Taken;
    pending.taken_by = it->second.owner;
    out->push_back(Request{id, pending.name, pending.document});
  }
  return out;
}

RequestBroker::Result RequestBroker::submit(const std::string& name, std::string document,
                                            Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  auto prefix = prefix_for(name, Clock::now());
  if (!prefix) return Result{false, "not found", "nobody serves '" + name + "'"};
  auto id = new_id();
  pending_[id] = Pending{name, std::move(document), *prefix, State::Queued, {}, {}};
  queues_[*prefix].push_back(id);
  changed_.notify_all();
  changed_.wait_until(lock, deadline,
                      [&] { return stopping_ || pending_.at(id).state == State::Done; });
  auto node = pending_.extract(id);
  auto& pending = node.mapped();
  if (pending.state == State::Done) return pending.result;
  if (pending.state == State::Queued) std::erase(queues_[pending.prefix], id);
  if (stopping_) return Result{false, "transport", "the endpoint is shutting down"};
  return Result{false, "timeout", "no reply for '" + name + "' in time"};
}

bool RequestBroker::reply(const std::string& request_id, Result result) {
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(request_id);
    // Only a request a server took has an answer to give (and an owner, see request_owner).
    if (it == pending_.end() || it->second.state != State::Taken) return false;
    it->second.state = State::Done;
    it->second.result = std::move(result);
  }
  changed_.notify_all();
  return true;
}

void RequestBroker::fail_orphans_locked(Clock::time_point now) {
  for (auto& [prefix, queue] : queues_) {
    // Named again: clang before 16 cannot capture a structured binding in a lambda.
    const auto& queue_prefix = prefix;
    bool served = std::any_of(servers_.begin(), servers_.end(), [&](const auto& kv) {
      return kv.second.prefix == queue_prefix && live(kv.second, now);
    });
    if (served) continue;
    for (const auto& id : queue) {
      auto& pending = pending_.at(id);
      pending.state = State::Done;
      pending.result = Result{false, "not found", "the server of '" + pending.name + "' left"};
    }
    queue.clear();
  }
}

void RequestBroker::sweep() {
  {
    std::lock_guard lock(mutex_);
    auto now = Clock::now();
    std::erase_if(servers_, [&](const auto& kv) { return !live(kv.second, now); });
    fail_orphans_locked(now);
    std::erase_if(queues_, [](const auto& kv) { return kv.second.empty(); });
  }
  changed_.notify_all();
}

void RequestBroker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

std::size_t RequestBroker::servers() {
  std::lock_guard lock(mutex_);
  return servers_.size();
}

std::size_t RequestBroker::pending() {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

}  // namespace memwire::sideband::http
