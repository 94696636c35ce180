#include "transport/stream/accepted_connections.hpp"

#include <algorithm>
#include <utility>

#include "transport/stream/stream_connection.hpp"

namespace memwire::detail {

AcceptedConnections::Counts AcceptedConnections::count(const std::string& peer) const {
  Counts counts;
  for (const auto& entry : entries_) {
    if (entry.closing || !entry.connection->alive()) continue;
    ++counts.live;
    const bool mine = entry.peer == peer;
    if (entry.standing == Standing::HelloOnly) {
      ++counts.hello_only;
      if (mine) ++counts.peer_unproven;
    } else if (entry.standing == Standing::Shared) {
      ++counts.shared;
      if (mine) ++counts.peer_shared;
    }
  }
  return counts;
}

AcceptedConnections::Entry* AcceptedConnections::oldest_hello_only(const std::string* peer) {
  for (auto& entry : entries_)
    if (entry.standing == Standing::HelloOnly && !entry.closing && entry.connection->alive() &&
        (peer == nullptr || entry.peer == *peer))
      return &entry;
  return nullptr;
}

AcceptedConnections::Room AcceptedConnections::make_room(const std::string& peer) {
  Room room;
  std::lock_guard lock(mutex_);
  auto counts = count(peer);
  const auto now = std::chrono::steady_clock::now();
  // Closes the oldest Hello-only connection (`whose`, when given), if it has been so for
  // `at_least`; false when there is none.
  const auto evict = [&](const std::string* whose, const std::string& why,
                         std::chrono::steady_clock::duration at_least = {}) {
    auto* entry = oldest_hello_only(whose);
    if (entry == nullptr || now - entry->accepted_at < at_least) return false;
    // Counted as gone from now: its close is the caller's, after this.
    entry->closing = true;
    room.evicted.push_back(entry->connection);
    room.why_evicted = why;
    --counts.live;
    --counts.hello_only;
    if (entry->peer == peer) --counts.peer_unproven;
    return true;
  };
  // The peer's own first: a peer over its share makes room among its own connections that
  // stayed Hello-only past their grace; with none, the new one is refused (a peer dialling many
  // at once is refused its newest, never its older ones about to carry requests). A peer whose
  // connections are all shared still gets this one, which may be granted: should it not be,
  // its first request is refused (rise).
  if (counts.peer_unproven + counts.peer_shared >= limits_.per_peer && counts.peer_unproven > 0 &&
      !evict(&peer,
             "closed by the owner to make room for a newer connection of this peer: it had "
             "sent no admitted request (max_connections_per_peer " +
                 std::to_string(limits_.per_peer) + ", from " + peer + ")",
             kGrace)) {
    room.refusal = "over its connection limit for one peer (max_connections_per_peer " +
                   std::to_string(limits_.per_peer) + ", from " + peer + ")";
    return room;
  }
  // Only past their grace: a burst of honest peers dialling at once is Hello-only together for
  // a round trip, and is bounded by max_connections meanwhile.
  if (counts.hello_only >= limits_.hello_only)
    evict(nullptr,
          "closed by the owner to make room for a newer connection: the oldest of "
          "its Hello-only connections (max_hello_only_connections " +
              std::to_string(limits_.hello_only) + ")",
          kGrace);
  if (counts.live >= limits_.total &&
      !evict(nullptr,
             "closed by the owner to make room for a newer connection: the oldest of "
             "its Hello-only connections, at its connection limit (max_connections " +
                 std::to_string(limits_.total) + ")"))
    room.refusal =
        "over its connection limit (max_connections " + std::to_string(limits_.total) + ")";
  return room;
}

void AcceptedConnections::add(std::shared_ptr<StreamConnection> connection, std::string peer) {
  std::lock_guard lock(mutex_);
  entries_.push_back({std::move(connection), std::move(peer), Standing::HelloOnly});
}

std::optional<std::string> AcceptedConnections::rise(const StreamConnection& connection,
                                                     Standing standing) {
  std::lock_guard lock(mutex_);
  auto found = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& entry) {
    return entry.connection.get() == &connection;
  });
  if (found == entries_.end() || found->standing >= standing) return std::nullopt;
  if (standing == Standing::Shared) {
    const auto counts = count(found->peer);
    if (counts.shared >= limits_.shared)
      return "for shared-token and unauthenticated peers together (max_shared_connections " +
             std::to_string(limits_.shared) +
             "; the rest is kept for granted peers: a grant's token of its own is not counted "
             "here)";
    if (counts.peer_shared >= limits_.per_peer)
      return "for one peer (max_connections_per_peer " + std::to_string(limits_.per_peer) +
             ", from " + found->peer + ")";
  }
  found->standing = standing;
  return std::nullopt;
}

std::vector<std::shared_ptr<StreamConnection>> AcceptedConnections::overdue(
    std::chrono::steady_clock::duration bound) {
  std::vector<std::shared_ptr<StreamConnection>> late;
  const auto since = std::chrono::steady_clock::now() - bound;
  std::lock_guard lock(mutex_);
  for (auto& entry : entries_) {
    if (entry.accepted_at > since) break;  // in the order they were accepted
    if (entry.standing != Standing::HelloOnly || entry.closing) continue;
    entry.closing = true;
    late.push_back(entry.connection);
  }
  return late;
}

std::vector<std::shared_ptr<StreamConnection>> AcceptedConnections::take_finished() {
  std::vector<std::shared_ptr<StreamConnection>> finished;
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [&](Entry& entry) {
    if (!entry.connection->finished()) return false;
    finished.push_back(std::move(entry.connection));
    return true;
  });
  return finished;
}

std::vector<std::shared_ptr<StreamConnection>> AcceptedConnections::take_all() {
  std::vector<std::shared_ptr<StreamConnection>> all;
  std::lock_guard lock(mutex_);
  for (auto& entry : entries_) all.push_back(std::move(entry.connection));
  entries_.clear();
  return all;
}

}  // namespace memwire::detail
