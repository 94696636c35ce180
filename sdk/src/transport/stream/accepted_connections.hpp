#pragma once
// The connections a stream transport accepted, and the standing each has earned: what the
// listener's limits count, so that room stays for granted peers (StreamOptions: standings).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace memwire::detail {

class StreamConnection;

// What an accepted connection has shown of itself: nothing but (at most) a Hello; a request
// admitted under a one-shot operation's token or a pool's shared token; one under a grant's
// token. It only rises.
enum class Standing : std::uint8_t { HelloOnly = 0, Shared = 1, Granted = 2 };

class AcceptedConnections {
 public:
  struct Limits {
    std::size_t total = 512;      // every connection (ConnectorOptions::max_connections)
    std::size_t per_peer = 64;    // one peer's Hello-only and shared ones
    std::size_t hello_only = 64;  // Hello-only ones together
    std::size_t shared = 384;     // shared ones together
  };
  explicit AcceptedConnections(Limits limits) : limits_(limits) {}

  // At accept: room for one more connection of `peer`, made by closing Hello-only connections
  // (the oldest first: `evicted`, with why, for the caller to close), or a refusal naming the
  // limit when every connection in the way stands higher. Connections already closing do not
  // count.
  struct Room {
    std::optional<std::string> refusal;
    std::vector<std::shared_ptr<StreamConnection>> evicted;
    std::string why_evicted;
  };
  Room make_room(const std::string& peer);
  void add(std::shared_ptr<StreamConnection> connection, std::string peer);

  // A request of `connection` was admitted under a token that gives it `standing`: nullopt
  // when it stands so now, else what refused it (the limit, named), its standing unchanged.
  std::optional<std::string> rise(const StreamConnection& connection, Standing standing);
  // Hello-only connections accepted longer than `bound` ago, counted as closing from now (the
  // caller closes them).
  std::vector<std::shared_ptr<StreamConnection>> overdue(std::chrono::steady_clock::duration bound);

  // Those whose threads are done, taken out of the list.
  std::vector<std::shared_ptr<StreamConnection>> take_finished();
  std::vector<std::shared_ptr<StreamConnection>> take_all();

 private:
  struct Entry {
    std::shared_ptr<StreamConnection> connection;
    std::string peer;  // what the per-peer limit counts
    Standing standing = Standing::HelloOnly;
    bool closing = false;  // evicted: its close is under way
    std::chrono::steady_clock::time_point accepted_at = std::chrono::steady_clock::now();
  };
  struct Counts {
    std::size_t live = 0, hello_only = 0, shared = 0, peer_unproven = 0, peer_shared = 0;
  };
  // mutex_ held. Live connections by standing, and `peer`'s.
  Counts count(const std::string& peer) const;
  // mutex_ held. The oldest live Hello-only connection (of `peer` when given), or null.
  Entry* oldest_hello_only(const std::string* peer);

  // How long a new connection may be Hello-only before it may be closed for another (but at
  // max_connections): its peer's first request is a round trip away.
  static constexpr std::chrono::milliseconds kGrace{1000};

  const Limits limits_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;  // in the order they were accepted
};

}  // namespace memwire::detail
