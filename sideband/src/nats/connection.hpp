#pragma once

// One connection to a NATS server (or cluster) with its JetStream context: options and
// credentials, reconnects, and the connection events that outlive the channel.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "handles.hpp"
#include "memwire/sideband/nats.hpp"
#include "nkey_signer.hpp"

namespace memwire::sideband::nats_detail {

inline std::string in_quotes(std::string_view name) { return "'" + std::string(name) + "'"; }

// Messages a subscription delivered, for one thread that waits on them (a wait_for() or a
// request()), and whether a reconnect asks it to read the registry again.
struct Waiter {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<MsgPtr> updates;
  bool recheck = false;
};

// Subscribes `subject` with deliveries queued on `waiter`; the subscription keeps the waiter
// alive until nats.c is done with it.
SubscriptionPtr subscribe_waiter(natsConnection* connection, const std::string& subject,
                                 const std::shared_ptr<Waiter>& waiter, const std::string& what);

struct ConnectionEvents;

class NatsConnection {
 public:
  // Validates `options` (Error{InvalidArgument}) and connects at once.
  explicit NatsConnection(NatsOptions options);
  // Flushes (so the server drops our subscriptions before we hang up), closes, and waits
  // (bounded) for nats.c's closed event, so that no connection callback runs after us.
  ~NatsConnection();
  NatsConnection(const NatsConnection&) = delete;
  NatsConnection& operator=(const NatsConnection&) = delete;

  const NatsOptions& options() const noexcept { return options_; }
  natsConnection* get() const noexcept { return connection_.get(); }
  jsCtx* jetstream() const noexcept { return js_.get(); }

  void flush(std::chrono::milliseconds timeout);
  std::size_t max_payload() const;
  // The largest entry we send in one message.
  std::size_t max_entry() const;
  std::string connected_url() const;
  // A fresh reply subject under this connection's inbox prefix (NatsOptions::inbox_prefix).
  std::string new_inbox() const;

  // After a reconnect, `waiter` is told to recheck (updates sent meanwhile never reach a core
  // subscription). Held weakly.
  void recheck_on_reconnect(const std::shared_ptr<Waiter>& waiter);

  // The server refused something this connection sent (a subject its user may not publish
  // to): how many times so far, and what it said last.
  std::uint64_t permission_refusals() const;
  std::string last_permission_refusal() const;

 private:
  void connect();
  void close() noexcept;

  NatsOptions options_;
  std::string inbox_prefix_;
  std::shared_ptr<ConnectionEvents> events_;
  // Signs for every (re)connect, so it outlives connection_.
  std::unique_ptr<NkeySigner> nkey_signer_;
  ConnectionPtr connection_;
  JsPtr js_;
};

}  // namespace memwire::sideband::nats_detail
