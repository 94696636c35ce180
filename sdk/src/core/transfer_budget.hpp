#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace memwire::detail {

class TelemetryRecorder;

// The records one connector keeps for the tagged pool transfers of its peers, counted per
// connection and in total, and by who holds them: a granted peer (a grant's token: the name the
// grant gives it) per name; a shared-token peer per peer (a process over shm, an address over
// tcp), per user (the uid the kernel vouches for over a Unix socket) and all of them together in
// a share of the total, the rest of which only granted peers use (as a pool's notification
// queue keeps its room, PoolOptions). So no peer, however many connections, processes or
// addresses it opens under the shared token, makes the owner hold more than its share or
// refuse a granted peer; all of a connection's records go back when it closes. Two kinds: an
// open transfer (up to about 700 bytes: its tag, the peer's name and token), refused past a
// limit; the remembered outcome of an ended one (about 50 bytes, for a PoolEnd that may
// follow), which is simply not kept past a limit. Each kind has the limits; a granted peer's
// remembered outcomes count per connection and in total alone.
class TransferBudget {
 public:
  struct Limits {
    std::size_t per_connection = 4096;
    std::size_t per_peer = 8192;
    std::size_t per_user = 16384;
    std::size_t total = 65536;
    // Shared-token peers' records together; the rest of `total` is granted peers' room (none
    // when this is not below it).
    std::size_t shared = 16384;
  };
  enum class Record { Open = 0, Remembered = 1 };

  // `telemetry` (may be null) counts the open transfers (a gauge) and the refused ones.
  TransferBudget(Limits limits, std::shared_ptr<TelemetryRecorder> telemetry)
      : limits_(limits), telemetry_(std::move(telemetry)) {}

  // What one connection holds. Not thread-safe itself (its connection's handler uses it); the
  // budget it draws on is.
  class Account {
   public:
    Account(std::shared_ptr<TransferBudget> budget, std::string peer, std::optional<uid_t> user)
        : budget_(std::move(budget)), peer_(std::move(peer)), user_(user) {}
    ~Account();  // gives back all it holds
    Account(const Account&) = delete;
    Account& operator=(const Account&) = delete;
    // One more open transfer of `granted` (the name a grant gives its peer; empty: the shared
    // token); throws Error{Transport} naming the limit it would pass.
    void open(const std::string& granted = {});
    // One more remembered outcome of a granted peer's transfer or a shared-token one's; false
    // (nothing counted) when a limit has no room for it.
    bool remember(bool granted);
    // Gives back `count` open transfers that open(granted) counted.
    void close(const std::string& granted = {}, std::size_t count = 1);
    // Gives back one remembered outcome that remember(granted) counted.
    void forget(bool granted);
    // Gives back every record of `kind` this connection holds.
    void release_all(Record kind);
    std::size_t held(Record kind) const noexcept { return held_[index(kind)]; }

   private:
    // Counts one `kind` record unless a limit is reached: then the name of that limit and whose
    // it is, for the refusal. `granted`: null under the shared token.
    std::optional<std::string> add(Record kind, const std::string* granted);
    void drop(Record kind, const std::string* granted, std::size_t count);

    std::shared_ptr<TransferBudget> budget_;
    std::string peer_;
    std::optional<uid_t> user_;
    std::array<std::size_t, 2> held_{};
    std::array<std::size_t, 2> most_held_{};
    // Of held_: those under the shared token, and granted peers' open ones by name (a
    // connection mostly carries one grant's).
    std::array<std::size_t, 2> shared_held_{};
    std::size_t granted_remembered_ = 0;
    std::unordered_map<std::string, std::size_t> granted_open_;
  };

  // Records of `kind` held by every connection together.
  std::size_t held(Record kind) const;

  // Asks malloc to give its free pages back once closed connections freed kTrimAfter records
  // since it last did, or the last record went: a peer that leaves takes its memory with it,
  // not only its count (glibc keeps what the loop threads freed otherwise: 163 of 169 MiB after
  // 262,144 open transfers went). Called once closed connections are gone, buffers and all.
  void trim_if_due();
  static constexpr std::size_t kTrimAfter = 4096;

 private:
  using Counts = std::array<std::size_t, 2>;
  static constexpr std::size_t index(Record kind) { return static_cast<std::size_t>(kind); }
  // A connection that held at most `most` records at once closed (they are freed by now).
  void closed(std::size_t most);

  const Limits limits_;
  const std::shared_ptr<TelemetryRecorder> telemetry_;
  mutable std::mutex mutex_;
  // Peers and users with a live connection or a record: an entry goes when a connection that
  // leaves finds it empty (its number bounded by the connections).
  std::unordered_map<std::string, Counts> per_peer_;
  std::unordered_map<uid_t, Counts> per_user_;
  // Granted peers' open transfers by the name their grant gives them (an entry goes when it
  // empties: their number bounded by the records).
  std::unordered_map<std::string, std::size_t> per_grantee_;
  Counts total_{};
  Counts shared_{};
  std::size_t freed_since_trim_ = 0;
};

}  // namespace memwire::detail
