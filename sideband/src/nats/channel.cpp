#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <stop_token>
#include <thread>
#include <utility>

#include "entry.hpp"
#include "handles.hpp"
#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"

namespace memwire::sideband {

using namespace nats_detail;

namespace {

constexpr const char* kQueueGroup = "memwire";
// Room left in a message for the entry's own fields and for headers nats.c or JetStream add.
constexpr std::size_t kHeadroom = 4096;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string in_quotes(std::string_view name) { return "'" + std::string(name) + "'"; }

std::string random_key() {
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key;
  for (int word = 0; word < 2; ++word) {
    auto bits = engine();
    for (int i = 0; i < 16; ++i, bits >>= 4) key += kHex[bits & 0xf];
  }
  return key;
}

std::string_view code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "invalid_argument";
    case ErrorCode::InvalidMetadata:
      return "invalid_metadata";
    case ErrorCode::Pairing:
      return "pairing";
    case ErrorCode::SizeMismatch:
      return "size_mismatch";
    case ErrorCode::Timeout:
      return "timeout";
    case ErrorCode::Cancelled:
      return "cancelled";
    case ErrorCode::PeerLost:
      return "peer_lost";
    case ErrorCode::AccessDenied:
      return "access_denied";
    case ErrorCode::Transport:
      return "transport";
    case ErrorCode::NotFound:
      return "not_found";
    case ErrorCode::Protocol:
      return "protocol";
    case ErrorCode::Expired:
      return "expired";
  }
  return "transport";
}

ErrorCode code_from_name(std::string_view name) {
  for (auto code : {ErrorCode::InvalidArgument, ErrorCode::InvalidMetadata, ErrorCode::Pairing,
                    ErrorCode::SizeMismatch, ErrorCode::Timeout, ErrorCode::Cancelled,
                    ErrorCode::PeerLost, ErrorCode::AccessDenied, ErrorCode::Transport,
                    ErrorCode::NotFound, ErrorCode::Protocol, ErrorCode::Expired}) {
    if (code_name(code) == name) return code;
  }
  return ErrorCode::Transport;  // a newer owner's code we do not know
}

// Error::what() starts with the code's text; the reply carries the code on its own.
std::string message_of(const Error& error) {
  std::string text = error.what();
  std::string prefix = std::string(to_string(error.code())) + ": ";
  if (text.starts_with(prefix)) text.erase(0, prefix.size());
  return text;
}

std::string error_reply(std::string_view code, const std::string& message) {
  nlohmann::json reply = {{"ok", false}, {"code", code}, {"error", message}};
  return reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// What a publisher's responder answers with. Shared with its subscription's callback, which
// may still run after the channel dropped its reference; nats.c tells us when it is done.
struct Responder {
  std::mutex mutex;
  std::shared_ptr<const std::string> entry;
  std::int64_t expires_at_ms = 0;
  bool retired = false;  // expired and unsubscribed: a new publish needs a new subscription
};

void answer_metadata_request(natsConnection* connection, natsSubscription* subscription,
                             natsMsg* raw, void* closure) {
  MsgPtr message(raw);
  const char* reply = natsMsg_GetReply(raw);
  if (reply == nullptr) return;
  auto& responder = **static_cast<std::shared_ptr<Responder>*>(closure);
  std::shared_ptr<const std::string> entry;
  bool expired = false;
  {
    std::lock_guard lock(responder.mutex);
    entry = responder.entry;
    expired = responder.expires_at_ms != 0 && now_ms() >= responder.expires_at_ms;
    if (expired) responder.retired = true;
  }
  // Unsubscribe before replying: the server handles both in order, so no request sent after
  // the requester saw this reply can reach a subscription that no longer listens (a timeout).
  if (expired) natsSubscription_Unsubscribe(subscription);
  // An expired entry is still sent: the requester sees the expiry and asks the registry, which
  // may hold a newer value from another publisher.
  natsConnection_Publish(connection, reply, entry->data(), static_cast<int>(entry->size()));
}

void release_responder(void* closure) { delete static_cast<std::shared_ptr<Responder>*>(closure); }

struct Published {
  std::shared_ptr<Responder> responder;
  SubscriptionPtr subscription;
  std::string part_key;  // pieces of the current entry, if stored in parts
};

// Connection events, kept alive until nats.c reports the connection closed: its callbacks run
// on a library thread and may come after the channel began to go away.
// One wait_for() in progress: what its subscription on the name's KV subject delivered, and
// whether a reconnect asks it to read the registry again.
struct Waiter {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<MsgPtr> updates;
  bool recheck = false;
};

void deliver_update(natsConnection*, natsSubscription*, natsMsg* raw, void* closure) {
  MsgPtr message(raw);
  auto& waiter = **static_cast<std::shared_ptr<Waiter>*>(closure);
  std::lock_guard lock(waiter.mutex);
  waiter.updates.push_back(std::move(message));
  waiter.changed.notify_all();
}

void release_waiter(void* closure) { delete static_cast<std::shared_ptr<Waiter>*>(closure); }

struct ConnectionEvents {
  std::function<void()> on_disconnected;
  std::function<void()> on_reconnected;
  std::mutex mutex;
  std::condition_variable changed;
  bool closed = false;
  std::vector<std::weak_ptr<Waiter>> waiters;  // told to recheck after a reconnect
};

void on_disconnected(natsConnection*, void* closure) {
  auto& events = **static_cast<std::shared_ptr<ConnectionEvents>*>(closure);
  if (events.on_disconnected) events.on_disconnected();
}

void on_reconnected(natsConnection*, void* closure) {
  auto& events = **static_cast<std::shared_ptr<ConnectionEvents>*>(closure);
  {
    // Updates published while we were away never reach a core subscription: waiters look at
    // the registry again (their subscriptions are already back when this runs).
    std::lock_guard lock(events.mutex);
    for (auto& weak : events.waiters) {
      if (auto waiter = weak.lock()) {
        std::lock_guard waiter_lock(waiter->mutex);
        waiter->recheck = true;
        waiter->changed.notify_all();
      }
    }
  }
  if (events.on_reconnected) events.on_reconnected();
}

void on_closed(natsConnection*, void* closure) {
  auto* holder = static_cast<std::shared_ptr<ConnectionEvents>*>(closure);
  std::shared_ptr<ConnectionEvents> events = std::move(*holder);
  delete holder;
  std::lock_guard lock(events->mutex);
  events->closed = true;
  events->changed.notify_all();
}

// A serve() registration: one synchronous subscription per subject, each drained by its own
// thread, so that a slow handler holds up neither metadata responders nor other prefixes.
class ServeSubscription final : public Subscription {
 public:
  struct Worker {
    std::shared_ptr<void> keep_alive;  // the channel's state: the connection stays open
    natsConnection* connection = nullptr;
    std::function<std::string(natsMsg*)> answer;  // never throws
    SubscriptionPtr subscription;
  };

  void add(std::shared_ptr<Worker> worker) {
    workers_.push_back(worker);
    threads_.emplace_back([worker] { run(*worker); });
  }

  ~ServeSubscription() override {
    // Unsubscribing wakes each thread out of NextMsg; a handler in progress finishes first.
    for (auto& worker : workers_) natsSubscription_Unsubscribe(worker->subscription.get());
    // Once we return, the server must no longer route requests here (they would time out
    // instead of failing with "no responders"): a round trip proves it processed the UNSUBs.
    if (!workers_.empty()) natsConnection_FlushTimeout(workers_.front()->connection, 2000);
    for (auto& thread : threads_) {
      if (thread.get_id() == std::this_thread::get_id()) {
        thread.detach();  // destroyed from its own handler: the worker owns what it uses
      } else {
        thread.join();
      }
    }
  }

 private:
  static void run(Worker& worker) {
    for (;;) {
      natsMsg* raw = nullptr;
      // A day stands for "forever"; the wait ends early on a message or an unsubscribe.
      auto status = natsSubscription_NextMsg(&raw, worker.subscription.get(), 86'400'000);
      MsgPtr message(raw);
      if (status == NATS_TIMEOUT || status == NATS_SLOW_CONSUMER) continue;
      if (status != NATS_OK) return;  // unsubscribed or connection closed
      const std::string reply = worker.answer(raw);
      if (const char* to = natsMsg_GetReply(raw)) {
        natsConnection_Publish(worker.connection, to, reply.data(), static_cast<int>(reply.size()));
      }
    }
  }

  std::vector<std::shared_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

// "a,b" entries become "a" and "b"; blanks around commas and empty items are dropped.
std::vector<std::string> split_server_lists(const std::vector<std::string>& entries) {
  std::vector<std::string> urls;
  for (const auto& entry : entries) {
    std::size_t start = 0;
    while (start <= entry.size()) {
      auto comma = entry.find(',', start);
      if (comma == std::string::npos) comma = entry.size();
      auto item = entry.substr(start, comma - start);
      auto first = item.find_first_not_of(" \t");
      auto last = item.find_last_not_of(" \t");
      if (first != std::string::npos) urls.push_back(item.substr(first, last - first + 1));
      start = comma + 1;
    }
  }
  return urls;
}

void check(natsStatus status, const char* what) {
  if (status != NATS_OK) fail(status, std::string("nats options: ") + what);
}

}  // namespace

namespace nats_detail {

std::string describe(natsStatus status) {
  std::string text = natsStatus_GetText(status);
  natsStatus last_status = NATS_OK;
  const char* last = nats_GetLastError(&last_status);
  if (last != nullptr && *last != '\0' && last_status == status) {
    // nats.c prefixes "(file.c:line): "; the rest is what the server or the library said.
    std::string_view detail = last;
    if (detail.starts_with('(')) {
      auto close = detail.find("): ");
      if (close != std::string_view::npos) detail.remove_prefix(close + 3);
    }
    if (detail != text) text += " (" + std::string(detail) + ")";
  }
  return text;
}

void fail(natsStatus status, const std::string& what) {
  ErrorCode code = ErrorCode::Transport;
  switch (status) {
    case NATS_TIMEOUT:
      code = ErrorCode::Timeout;
      break;
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
      code = ErrorCode::AccessDenied;
      break;
    default:
      break;
  }
  throw Error(code, what + ": " + describe(status));
}

}  // namespace nats_detail

class NatsChannel::Impl : public std::enable_shared_from_this<NatsChannel::Impl> {
 public:
  explicit Impl(NatsOptions options) : options_(std::move(options)) {
    if (options_.servers.empty()) {
      throw Error(ErrorCode::InvalidArgument, "nats: no server URL given");
    }
    if (options_.cert_file.empty() != options_.key_file.empty()) {
      throw Error(ErrorCode::InvalidArgument, "nats: cert_file and key_file go together");
    }
    if (options_.nkey_public.empty() != options_.nkey_seed_file.empty()) {
      throw Error(ErrorCode::InvalidArgument, "nats: nkey_public and nkey_seed_file go together");
    }
    if (options_.kv_bucket.empty()) {
      throw Error(ErrorCode::InvalidArgument, "nats: kv_bucket must not be empty");
    }
    if (options_.kv_replicas < 1 || options_.kv_replicas > 5) {
      throw Error(ErrorCode::InvalidArgument,
                  "nats: kv_replicas must be 1..5, not " + std::to_string(options_.kv_replicas));
    }
    options_.servers = split_server_lists(options_.servers);
    if (options_.servers.empty()) {
      throw Error(ErrorCode::InvalidArgument, "nats: no server URL given");
    }
    if (options_.kv_max_age.count() != 0 && options_.kv_max_age < std::chrono::milliseconds(100)) {
      throw Error(ErrorCode::InvalidArgument, "nats: kv_max_age must be 0 or at least 100 ms");
    }
    validate_name(options_.subject_prefix);
    metadata_subject_ = options_.subject_prefix + ".md.";
    service_subject_ = options_.subject_prefix + ".get.";
    connect();
    try {
      open_registry();
    } catch (...) {
      close();
      throw;
    }
  }

  ~Impl() { close(); }

  natsConnection* connection() const { return connection_.get(); }

  std::size_t max_payload() const {
    auto limit = natsConnection_GetMaxPayload(connection_.get());
    return limit > 0 ? static_cast<std::size_t>(limit) : std::size_t{1} << 20;
  }

  // The largest entry we send in one message.
  std::size_t max_entry() const {
    auto limit = max_payload();
    return limit > 2 * kHeadroom ? limit - kHeadroom : limit / 2;
  }

  void publish(std::string_view name, const RdmaMetadata& metadata, std::chrono::milliseconds ttl) {
    validate_name(name);
    if (ttl.count() < 0) {
      throw Error(ErrorCode::InvalidArgument, "nats: negative TTL for " + in_quotes(name));
    }
    const std::int64_t expires_at = ttl.count() > 0 ? now_ms() + ttl.count() : 0;
    const std::string json = metadata.to_json();

    std::string part_key;
    std::string entry = encode_inline(json, expires_at);
    if (entry.size() > max_entry()) {
      part_key = random_key();
      auto parts = store_parts(part_key, json);
      entry = encode_parts(parts, part_key, json.size(), expires_at);
    }

    // The responder first: the KV put below is a round trip on the same connection, so when
    // publish returns the server has the subscription and a fetch from anywhere is answered.
    std::string old_part_key;
    try {
      old_part_key = install_responder(name, entry, expires_at, part_key);
      uint64_t revision = 0;
      auto status = kvStore_Put(&revision, kv_.get(), std::string(name).c_str(), entry.data(),
                                static_cast<int>(entry.size()));
      if (status != NATS_OK) fail(status, "nats: storing " + in_quotes(name) + " in the registry");
    } catch (...) {
      remove_responder(name);
      if (!part_key.empty()) delete_parts(part_key);
      throw;
    }
    if (!old_part_key.empty() && old_part_key != part_key) delete_parts(old_part_key);
  }

  RdmaMetadata fetch(std::string_view name, std::chrono::milliseconds timeout) {
    validate_name(name);
    const std::string subject = metadata_subject_ + std::string(name);
    natsMsg* raw = nullptr;
    auto status =
        natsConnection_Request(&raw, connection_.get(), subject.c_str(), "", 0, to_millis(timeout));
    MsgPtr reply(raw);
    switch (status) {
      case NATS_OK: {
        Entry entry =
            decode_entry(std::string_view(natsMsg_GetData(raw),
                                          static_cast<std::size_t>(natsMsg_GetDataLength(raw))),
                         name);
        if (!entry.expired(now_ms())) return resolve(entry, name, /*may_retry=*/true);
        break;  // expired at its publisher: the registry may hold a newer value
      }
      case NATS_NO_RESPONDERS:
        break;  // no live publisher: the registry decides
      case NATS_TIMEOUT:
        throw Error(ErrorCode::Timeout, "nats: the publisher of " + in_quotes(name) +
                                            " did not answer within " +
                                            std::to_string(timeout.count()) + " ms");
      default:
        fail(status, "nats: requesting " + in_quotes(name));
    }
    return from_registry(name, /*may_retry=*/true);
  }

  void withdraw(std::string_view name) {
    validate_name(name);
    auto published = remove_responder(name);
    const std::string key(name);

    // What the registry holds now (another process may have written it), for its pieces.
    std::string registry_parts;
    kvEntry* raw = nullptr;
    auto status = kvStore_Get(&raw, kv_.get(), key.c_str());
    EntryPtr current(raw);
    if (status == NATS_OK) {
      try {
        registry_parts = decode_entry(value_of(raw), name).part_key;
      } catch (const Error&) {
        // A malformed entry is removed all the same.
      }
      // A KV delete leaves the usual tombstone, so other KV watchers see the name go.
      status = kvStore_Delete(kv_.get(), key.c_str());
      if (status != NATS_OK) {
        fail(status, "nats: deleting " + in_quotes(name) + " from the registry");
      }
    } else if (status != NATS_NOT_FOUND) {
      fail(status, "nats: reading " + in_quotes(name) + " from the registry");
    }
    if (!registry_parts.empty()) delete_parts(registry_parts);
    if (published && !published->part_key.empty() && published->part_key != registry_parts) {
      delete_parts(published->part_key);
    }
  }

  // A plain subscription on the name's KV subject ($KV.<bucket>.<name>) sees every put as it
  // is stored; reading the registry once it is in place covers what came before. Not
  // kvStore_Watch: that creates a JetStream consumer per call (about 0.6 ms more, and one
  // consumer per waiter on the server), and nats.c 3.4.1 can read freed memory when such a
  // watcher is destroyed while its consumer is being recreated after a reconnect (seen under
  // AddressSanitizer in the restart test).
  RdmaMetadata wait_for(std::string_view name, std::chrono::milliseconds timeout) {
    validate_name(name);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // Already published (the usual case): no subscription needed.
    try {
      return from_registry(name, /*may_retry=*/true);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::NotFound) throw;
    }
    auto left = [&] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
    };
    auto waiter = std::make_shared<Waiter>();
    {
      std::lock_guard lock(events_->mutex);
      std::erase_if(events_->waiters, [](const auto& weak) { return weak.expired(); });
      events_->waiters.push_back(waiter);
    }
    const std::string subject = "$KV." + options_.kv_bucket + "." + std::string(name);
    auto* closure = new std::shared_ptr<Waiter>(waiter);
    natsSubscription* raw = nullptr;
    auto status =
        natsConnection_Subscribe(&raw, connection_.get(), subject.c_str(), deliver_update, closure);
    if (status != NATS_OK) {
      delete closure;
      fail(status, "nats: watching " + in_quotes(name));
    }
    SubscriptionPtr subscription(raw);
    natsSubscription_SetOnCompleteCB(raw, release_waiter, closure);
    // Once the server has the subscription, nothing published later can slip past us; then the
    // registry once more, for what came in between.
    status = natsConnection_FlushTimeout(connection_.get(), to_millis(left()));
    if (status == NATS_TIMEOUT) throw timed_out(name, timeout);
    if (status != NATS_OK) fail(status, "nats: watching " + in_quotes(name));

    for (bool check_registry = true;;) {
      if (check_registry) {
        try {
          return from_registry(name, /*may_retry=*/true);
        } catch (const Error& error) {
          if (error.code() != ErrorCode::NotFound) throw;
        }
      }
      std::unique_lock lock(waiter->mutex);
      if (!waiter->changed.wait_until(
              lock, deadline, [&] { return !waiter->updates.empty() || waiter->recheck; })) {
        throw timed_out(name, timeout);
      }
      check_registry = std::exchange(waiter->recheck, false);
      if (check_registry) continue;
      MsgPtr update = std::move(waiter->updates.front());
      waiter->updates.pop_front();
      lock.unlock();
      // Deletes and purges carry a KV-Operation header; puts do not.
      const char* operation = nullptr;
      if (natsMsgHeader_Get(update.get(), "KV-Operation", &operation) == NATS_OK) continue;
      auto entry = decode_entry(
          std::string_view(natsMsg_GetData(update.get()),
                           static_cast<std::size_t>(natsMsg_GetDataLength(update.get()))),
          name);
      if (entry.expired(now_ms())) continue;
      return resolve(entry, name, /*may_retry=*/true);
    }
  }

  static Error abandoned(std::string_view name) {
    return Error(ErrorCode::Cancelled, "nats: the request for " + in_quotes(name) +
                                           " was abandoned before the owner answered");
  }

  static Error timed_out(std::string_view name, std::chrono::milliseconds timeout) {
    return Error(ErrorCode::Timeout, "nats: " + in_quotes(name) + " was not published within " +
                                         std::to_string(timeout.count()) + " ms");
  }

  std::vector<std::string> list() {
    kvWatchOptions watch_options;
    kvWatchOptions_Init(&watch_options);
    watch_options.IgnoreDeletes = true;
    kvWatcher* raw_watcher = nullptr;
    auto status = kvStore_WatchAll(&raw_watcher, kv_.get(), &watch_options);
    WatcherPtr watcher(raw_watcher);
    if (status != NATS_OK) fail(status, "nats: listing the registry");

    std::vector<std::string> names;
    const auto now = now_ms();
    for (;;) {
      kvEntry* raw = nullptr;
      status = kvWatcher_Next(&raw, watcher.get(), to_millis(options_.request_timeout));
      EntryPtr update(raw);
      if (status != NATS_OK) fail(status, "nats: listing the registry");
      if (!update) break;  // the initial values are all in
      if (kvEntry_Operation(raw) != kvOp_Put) continue;
      const std::string name = kvEntry_Key(raw);
      try {
        if (decode_entry(value_of(raw), name).expired(now)) continue;
      } catch (const Error&) {
        // Listed all the same: fetching it reports what is wrong.
      }
      names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  void request(std::string_view name, const RdmaMetadata& writable,
               std::chrono::milliseconds timeout, std::stop_token abandon) {
    validate_name(name);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (writable.operation_kind() != OperationKind::Write) {
      throw Error(ErrorCode::Pairing,
                  "nats: a request for " + in_quotes(name) + " must carry writable metadata");
    }
    const std::string json = writable.to_json();
    std::string payload = encode_inline(json, 0);
    std::string part_key;
    if (payload.size() > max_entry()) {
      part_key = random_key();
      auto parts = store_parts(part_key, json);
      payload = encode_parts(parts, part_key, json.size(), 0);
    }
    struct PartsCleanup {
      Impl* self;
      const std::string& key;
      ~PartsCleanup() {
        if (!key.empty()) self->delete_parts(key);
      }
    } cleanup{this, part_key};

    // Not natsConnection_Request: it cannot be abandoned. The reply comes to an inbox of our
    // own; the wait ends on the reply, the deadline or `abandon`, whichever comes first.
    const std::string subject = service_subject_ + std::string(name);
    const std::string what = "nats: requesting " + in_quotes(name);
    if (abandon.stop_requested()) throw abandoned(name);
    natsInbox* raw_inbox = nullptr;
    auto status = natsInbox_Create(&raw_inbox);
    if (status != NATS_OK) fail(status, what);
    InboxPtr inbox(raw_inbox);
    auto waiter = std::make_shared<Waiter>();
    auto* closure = new std::shared_ptr<Waiter>(waiter);
    natsSubscription* raw = nullptr;
    status =
        natsConnection_Subscribe(&raw, connection_.get(), inbox.get(), deliver_update, closure);
    if (status != NATS_OK) {
      delete closure;
      fail(status, what);
    }
    SubscriptionPtr subscription(raw);
    natsSubscription_SetOnCompleteCB(raw, release_waiter, closure);
    // One answer is all a request takes: a responder that keeps sending cannot grow the queue.
    status = natsSubscription_AutoUnsubscribe(raw, 1);
    if (status != NATS_OK) fail(status, what);
    // The server handles our SUB before the PUB that follows it: no reply can slip past.
    status = natsConnection_PublishRequest(connection_.get(), subject.c_str(), inbox.get(),
                                           payload.data(), static_cast<int>(payload.size()));
    if (status != NATS_OK) fail(status, what);

    // Taking the mutex before notifying: a stop between the predicate and the wait is not lost.
    std::stop_callback wake(abandon, [waiter] {
      std::lock_guard lock(waiter->mutex);
      waiter->changed.notify_all();
    });
    std::unique_lock lock(waiter->mutex);
    if (!waiter->changed.wait_until(
            lock, deadline, [&] { return !waiter->updates.empty() || abandon.stop_requested(); })) {
      throw Error(ErrorCode::Timeout, "nats: the owner of " + in_quotes(name) +
                                          " did not answer within " +
                                          std::to_string(timeout.count()) + " ms");
    }
    if (waiter->updates.empty()) throw abandoned(name);
    MsgPtr reply = std::move(waiter->updates.front());
    lock.unlock();
    // With headers (nats-server 2.2+), the server itself answers when nobody listens.
    if (natsMsg_IsNoResponders(reply.get())) {
      throw Error(ErrorCode::NotFound, "nats: nobody serves " + in_quotes(name));
    }
    check_reply(std::string_view(natsMsg_GetData(reply.get()),
                                 static_cast<std::size_t>(natsMsg_GetDataLength(reply.get()))),
                name);
  }

  std::unique_ptr<Subscription> serve(std::string_view prefix, Channel::RequestHandler handler) {
    if (!handler) throw Error(ErrorCode::InvalidArgument, "nats: serve() needs a handler");
    std::vector<std::string> subjects;
    if (prefix.empty()) {
      subjects.push_back(service_subject_ + ">");
    } else {
      validate_name(prefix);
      subjects.push_back(service_subject_ + std::string(prefix));
      subjects.push_back(service_subject_ + std::string(prefix) + ".>");
    }
    auto subscription = std::make_unique<ServeSubscription>();
    for (const auto& subject : subjects) {
      natsSubscription* raw = nullptr;
      auto status =
          natsConnection_QueueSubscribeSync(&raw, connection_.get(), subject.c_str(), kQueueGroup);
      if (status != NATS_OK) fail(status, "nats: subscribing " + subject);
      auto worker = std::make_shared<ServeSubscription::Worker>();
      worker->subscription.reset(raw);
      worker->keep_alive = shared_from_this();
      worker->connection = connection_.get();
      worker->answer = [self = this, handler](natsMsg* message) {
        return self->answer(message, handler);
      };
      subscription->add(std::move(worker));
    }
    // Requests sent after serve() returns must find the subscriptions in place.
    flush(options_.request_timeout);
    return subscription;
  }

  // Answers one request of a serve() subscription; never throws.
  std::string answer(natsMsg* message, const Channel::RequestHandler& handler) {
    std::string name;
    try {
      std::string_view subject = natsMsg_GetSubject(message);
      subject.remove_prefix(std::min(subject.size(), service_subject_.size()));
      name = subject;
      auto entry =
          decode_entry(std::string_view(natsMsg_GetData(message),
                                        static_cast<std::size_t>(natsMsg_GetDataLength(message))),
                       name);
      auto writable = resolve(entry, name, /*may_retry=*/false);
      if (writable.operation_kind() != OperationKind::Write) {
        throw Error(ErrorCode::Pairing, "the request for " + in_quotes(name) +
                                            " carries metadata of a readable operation");
      }
      handler(name, writable);
      return R"({"ok":true})";
    } catch (const Error& error) {
      return error_reply(code_name(error.code()), message_of(error));
    } catch (const std::exception& error) {
      return error_reply("transport",
                         std::string("serving ") + in_quotes(name) + ": " + error.what());
    } catch (...) {
      return error_reply("transport", "serving " + in_quotes(name) + ": unknown failure");
    }
  }

  void flush(std::chrono::milliseconds timeout) {
    auto status = natsConnection_FlushTimeout(connection_.get(), to_millis(timeout));
    if (status != NATS_OK) fail(status, "nats: flush");
  }

  std::string connected_url() const {
    char buffer[512] = {};
    if (natsConnection_GetConnectedUrl(connection_.get(), buffer, sizeof(buffer)) != NATS_OK) {
      return {};
    }
    return buffer;
  }

 private:
  void close() noexcept {
    {
      std::lock_guard lock(mutex_);
      published_.clear();  // destroying a subscription unsubscribes it
    }
    parts_.reset();
    kv_.reset();
    js_.reset();
    if (!connection_) return;
    // The server drops our responders before we hang up, so a fetch sent right after this
    // channel is gone gets "no responders" (and the registry), not a timeout.
    natsConnection_FlushTimeout(connection_.get(), 1000);
    // Wait (bounded) for nats.c's closed event so that no connection callback runs after us.
    natsConnection_Close(connection_.get());
    std::unique_lock lock(events_->mutex);
    events_->changed.wait_for(lock, std::chrono::seconds(5), [&] { return events_->closed; });
    lock.unlock();
    connection_.reset();
  }

  void connect() {
    natsOptions* raw_options = nullptr;
    check(natsOptions_Create(&raw_options), "create");
    OptionsPtr nats_options(raw_options);
    natsOptions* o = raw_options;

    std::vector<const char*> servers;
    for (const auto& url : options_.servers) servers.push_back(url.c_str());
    check(natsOptions_SetServers(o, servers.data(), static_cast<int>(servers.size())), "servers");
    check(natsOptions_SetNoRandomize(o, true), "no randomize");
    if (!options_.connection_name.empty()) {
      check(natsOptions_SetName(o, options_.connection_name.c_str()), "name");
    }
    if (!options_.user.empty() || !options_.password.empty()) {
      check(natsOptions_SetUserInfo(o, options_.user.c_str(), options_.password.c_str()), "user");
    }
    if (!options_.token.empty()) check(natsOptions_SetToken(o, options_.token.c_str()), "token");
    if (!options_.nkey_public.empty()) {
      check(natsOptions_SetNKeyFromSeed(o, options_.nkey_public.c_str(),
                                        options_.nkey_seed_file.c_str()),
            "nkey");
    }
    if (!options_.creds_file.empty()) {
      check(natsOptions_SetUserCredentialsFromFiles(o, options_.creds_file.c_str(), nullptr),
            "creds file");
    }
    // nats.c 3.4 does not turn TLS on for a "tls://" URL by itself: never fall back to plain.
    bool tls_url = false;
    for (const auto& url : options_.servers) tls_url = tls_url || url.starts_with("tls://");
    if (options_.tls || tls_url || !options_.ca_file.empty() || !options_.cert_file.empty()) {
      check(natsOptions_SetSecure(o, true), "tls");
      if (!options_.ca_file.empty()) {
        check(natsOptions_LoadCATrustedCertificates(o, options_.ca_file.c_str()), "ca_file");
      }
      if (!options_.cert_file.empty()) {
        check(natsOptions_LoadCertificatesChain(o, options_.cert_file.c_str(),
                                                options_.key_file.c_str()),
              "cert_file/key_file");
      }
    }
    check(natsOptions_SetTimeout(o, to_millis(options_.connect_timeout)), "timeout");
    // Latency over throughput: replies and requests leave at once instead of being batched.
    check(natsOptions_SetSendAsap(o, true), "send asap");
    // One library thread pool delivers to all responders, instead of a thread per name.
    check(natsOptions_UseGlobalMessageDelivery(o, true), "global delivery");
    check(natsOptions_SetAllowReconnect(o, options_.max_reconnect != 0), "reconnect");
    check(natsOptions_SetMaxReconnect(o, options_.max_reconnect), "max reconnect");
    check(natsOptions_SetReconnectWait(o, to_millis(options_.reconnect_wait)), "reconnect wait");
    check(natsOptions_SetReconnectBufSize(o, options_.reconnect_buffer_bytes), "reconnect buffer");
    check(natsOptions_SetPingInterval(o, to_millis(options_.ping_interval)), "ping interval");
    check(natsOptions_SetMaxPingsOut(o, std::max(1, options_.max_pings_out)), "max pings out");

    events_ = std::make_shared<ConnectionEvents>();
    events_->on_disconnected = options_.on_disconnected;
    events_->on_reconnected = options_.on_reconnected;
    // One closure for the three callbacks, freed by the closed callback (the last one).
    auto* closure = new std::shared_ptr<ConnectionEvents>(events_);
    check(natsOptions_SetDisconnectedCB(o, nats_disconnected, closure), "disconnected cb");
    check(natsOptions_SetReconnectedCB(o, nats_reconnected, closure), "reconnected cb");
    check(natsOptions_SetClosedCB(o, nats_closed, closure), "closed cb");

    natsConnection* raw = nullptr;
    auto status = natsConnection_Connect(&raw, o);
    if (status != NATS_OK) {
      // No connection was made, so no callback will ever see the closure.
      delete closure;
      std::string where;
      for (const auto& url : options_.servers) where += (where.empty() ? "" : ", ") + url;
      if (status == NATS_CONNECTION_AUTH_FAILED || status == NATS_NOT_PERMITTED) {
        throw Error(ErrorCode::AccessDenied,
                    "nats: " + where + " refused the credentials: " + describe(status));
      }
      if (status == NATS_NO_SERVER) {
        throw Error(ErrorCode::Transport,
                    "nats: no server reachable at " + where + ": " + describe(status));
      }
      fail(status, "nats: connecting to " + where);
    }
    connection_.reset(raw);
  }

  static void nats_disconnected(natsConnection* c, void* closure) { on_disconnected(c, closure); }
  static void nats_reconnected(natsConnection* c, void* closure) { on_reconnected(c, closure); }
  static void nats_closed(natsConnection* c, void* closure) { on_closed(c, closure); }

  void open_registry() {
    jsOptions js_options;
    jsOptions_Init(&js_options);
    js_options.Wait = to_millis(options_.request_timeout);
    jsCtx* raw_js = nullptr;
    auto status = natsConnection_JetStream(&raw_js, connection_.get(), &js_options);
    js_.reset(raw_js);
    if (status != NATS_OK) fail(status, "nats: JetStream context");
    kv_ = open_bucket(options_.kv_bucket);
  }

  KvPtr open_bucket(const std::string& bucket) {
    kvStore* raw = nullptr;
    auto status = js_KeyValue(&raw, js_.get(), bucket.c_str());
    if (status == NATS_NOT_FOUND) {
      kvConfig config;
      kvConfig_Init(&config);
      config.Bucket = bucket.c_str();
      config.History = 1;
      // nats.c 3.4 passes TTL on as the stream's MaxAge: nanoseconds.
      config.TTL =
          std::chrono::duration_cast<std::chrono::nanoseconds>(options_.kv_max_age).count();
      config.StorageType = js_FileStorage;
      config.Replicas = options_.kv_replicas;
      status = js_CreateKeyValue(&raw, js_.get(), &config);
      if (status != NATS_OK) {
        const std::string why = describe(status);
        // Another client may have created it in between.
        if (js_KeyValue(&raw, js_.get(), bucket.c_str()) != NATS_OK) {
          throw Error(status == NATS_TIMEOUT ? ErrorCode::Timeout : ErrorCode::Transport,
                      "nats: creating KV bucket '" + bucket + "': " + why);
        }
        status = NATS_OK;
      }
    }
    KvPtr store(raw);
    if (status == NATS_NO_RESPONDERS) {
      throw Error(ErrorCode::Transport,
                  "nats: JetStream is not enabled on the server (needed for the KV bucket '" +
                      bucket + "')");
    }
    if (status != NATS_OK) fail(status, "nats: opening KV bucket '" + bucket + "'");
    return store;
  }

  kvStore* parts_store() {
    std::lock_guard lock(parts_mutex_);
    if (!parts_) parts_ = open_bucket(options_.kv_bucket + "_parts");
    return parts_.get();
  }

  static std::string_view value_of(kvEntry* entry) {
    const void* data = kvEntry_Value(entry);
    if (data == nullptr) return {};
    return {static_cast<const char*>(data), static_cast<std::size_t>(kvEntry_ValueLen(entry))};
  }

  std::size_t store_parts(const std::string& part_key, const std::string& json) {
    if (json.size() > kMaxMetadataBytes) {
      throw Error(ErrorCode::InvalidArgument,
                  "nats: metadata of " + std::to_string(json.size()) + " bytes exceeds the " +
                      std::to_string(kMaxMetadataBytes) + "-byte limit");
    }
    kvStore* store = parts_store();
    const std::size_t piece = max_entry();
    const std::size_t parts = (json.size() + piece - 1) / piece;
    for (std::size_t i = 0; i < parts; ++i) {
      const std::string key = part_key + "." + std::to_string(i);
      const std::size_t offset = i * piece;
      const std::size_t length = std::min(piece, json.size() - offset);
      uint64_t revision = 0;
      auto status = kvStore_Put(&revision, store, key.c_str(), json.data() + offset,
                                static_cast<int>(length));
      if (status != NATS_OK) {
        delete_parts(part_key);
        fail(status, "nats: storing part " + std::to_string(i) + " of a large metadata");
      }
    }
    return parts;
  }

  // Best effort: pieces left behind only take room until the bucket's MaxAge. One purge of the
  // parts stream filtered by subject removes every piece of `part_key` and, unlike a KV delete,
  // leaves no tombstone per piece behind.
  void delete_parts(const std::string& part_key) noexcept {
    try {
      kvStore* store = parts_store();
      const std::string bucket = options_.kv_bucket + "_parts";
      const std::string subject = "$KV." + bucket + "." + part_key + ".>";
      jsOptions purge;
      jsOptions_Init(&purge);
      purge.Stream.Purge.Subject = subject.c_str();
      jsErrCode error_code{};
      if (js_PurgeStream(js_.get(), ("KV_" + bucket).c_str(), &purge, &error_code) == NATS_OK) {
        return;
      }
      // Not allowed to purge streams (restricted account): delete piece by piece.
      for (std::size_t i = 0;; ++i) {
        const std::string key = part_key + "." + std::to_string(i);
        kvEntry* raw = nullptr;
        auto status = kvStore_Get(&raw, store, key.c_str());
        EntryPtr entry(raw);
        if (status != NATS_OK) break;
        kvStore_Purge(store, key.c_str(), nullptr);
      }
    } catch (...) {
    }
  }

  std::string read_parts(const Entry& entry, std::string_view name) {
    kvStore* store = parts_store();
    std::string json;
    json.reserve(entry.size);
    for (std::size_t i = 0; i < entry.parts; ++i) {
      const std::string key = entry.part_key + "." + std::to_string(i);
      kvEntry* raw = nullptr;
      auto status = kvStore_Get(&raw, store, key.c_str());
      EntryPtr piece(raw);
      if (status == NATS_NOT_FOUND) {
        throw Error(ErrorCode::NotFound,
                    "nats: part " + std::to_string(i) + " of " + in_quotes(name) + " is gone");
      }
      if (status != NATS_OK) fail(status, "nats: reading part of " + in_quotes(name));
      json.append(value_of(raw));
      if (json.size() > entry.size) break;
    }
    if (json.size() != entry.size) {
      throw Error(ErrorCode::InvalidMetadata, "nats: the parts of " + in_quotes(name) +
                                                  " add up to " + std::to_string(json.size()) +
                                                  " bytes, not " + std::to_string(entry.size));
    }
    return json;
  }

  RdmaMetadata resolve(const Entry& entry, std::string_view name, bool may_retry) {
    if (entry.parts == 0) return RdmaMetadata::from_json(entry.metadata_json);
    try {
      return RdmaMetadata::from_json(read_parts(entry, name));
    } catch (const Error& error) {
      // A publish or withdraw replaced the pieces while we read them: ask the registry again.
      if (error.code() != ErrorCode::NotFound || !may_retry) throw;
    }
    return from_registry(name, /*may_retry=*/false);
  }

  RdmaMetadata from_registry(std::string_view name, bool may_retry) {
    const std::string key(name);
    kvEntry* raw = nullptr;
    auto status = kvStore_Get(&raw, kv_.get(), key.c_str());
    EntryPtr stored(raw);
    if (status == NATS_NOT_FOUND) {
      throw Error(ErrorCode::NotFound, "nats: " + in_quotes(name) + " is not published");
    }
    if (status == NATS_NO_RESPONDERS) {
      throw Error(ErrorCode::Transport, "nats: JetStream is not available to read " +
                                            in_quotes(name) + " from the registry");
    }
    if (status != NATS_OK) fail(status, "nats: reading " + in_quotes(name) + " from the registry");
    auto entry = decode_entry(value_of(raw), name);
    if (entry.expired(now_ms())) {
      throw Error(ErrorCode::NotFound, "nats: " + in_quotes(name) + " has expired");
    }
    return resolve(entry, name, may_retry);
  }

  // Sets what the responder of `name` answers, subscribing it if needed. Returns the part key
  // of the entry it replaces.
  std::string install_responder(std::string_view name, const std::string& entry,
                                std::int64_t expires_at, const std::string& part_key) {
    auto shared_entry = std::make_shared<const std::string>(entry);
    std::lock_guard lock(mutex_);
    auto& slot = published_[std::string(name)];
    if (slot) {
      std::lock_guard responder_lock(slot->responder->mutex);
      if (!slot->responder->retired) {
        slot->responder->entry = shared_entry;
        slot->responder->expires_at_ms = expires_at;
        return std::exchange(slot->part_key, part_key);
      }
    }
    auto published = std::make_shared<Published>();
    published->responder = std::make_shared<Responder>();
    published->responder->entry = shared_entry;
    published->responder->expires_at_ms = expires_at;
    published->part_key = part_key;

    const std::string subject = metadata_subject_ + std::string(name);
    auto* closure = new std::shared_ptr<Responder>(published->responder);
    natsSubscription* raw = nullptr;
    auto status = natsConnection_Subscribe(&raw, connection_.get(), subject.c_str(),
                                           answer_metadata_request, closure);
    if (status != NATS_OK) {
      delete closure;
      if (!slot) published_.erase(std::string(name));
      fail(status, "nats: subscribing " + subject);
    }
    published->subscription.reset(raw);
    // Failure means the connection closed already; the closure then stays (a few bytes) rather
    // than risk freeing it under a callback.
    natsSubscription_SetOnCompleteCB(raw, release_responder, closure);
    std::string old_part_key = slot ? slot->part_key : std::string();
    slot = std::move(published);
    return old_part_key;
  }

  std::shared_ptr<Published> remove_responder(std::string_view name) {
    std::shared_ptr<Published> published;
    {
      std::lock_guard lock(mutex_);
      auto it = published_.find(std::string(name));
      if (it == published_.end()) return nullptr;
      published = std::move(it->second);
      published_.erase(it);
    }
    natsSubscription_Unsubscribe(published->subscription.get());
    return published;
  }

  void check_reply(std::string_view text, std::string_view name) {
    auto reply = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
    auto protocol = [&](const char* why) {
      throw Error(ErrorCode::Protocol, "nats: the owner of " + in_quotes(name) +
                                           " sent a malformed reply (" + why + ")");
    };
    if (reply.is_discarded() || !reply.is_object()) protocol("not a JSON object");
    auto ok = reply.find("ok");
    if (ok == reply.end() || !ok->is_boolean()) protocol("no boolean 'ok'");
    if (ok->get<bool>()) return;
    auto code = reply.find("code");
    auto message = reply.find("error");
    std::string code_text =
        code != reply.end() && code->is_string() ? code->get<std::string>() : "transport";
    std::string message_text = message != reply.end() && message->is_string()
                                   ? message->get<std::string>()
                                   : std::string("no reason given");
    throw Error(code_from_name(code_text),
                "the owner of " + in_quotes(name) + " failed: " + message_text);
  }

  NatsOptions options_;
  std::string metadata_subject_;  // "<prefix>.md."
  std::string service_subject_;   // "<prefix>.get."
  std::shared_ptr<ConnectionEvents> events_;
  ConnectionPtr connection_;
  JsPtr js_;
  KvPtr kv_;
  std::mutex parts_mutex_;
  KvPtr parts_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Published>, std::less<>> published_;
};

NatsChannel::NatsChannel(NatsOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

NatsChannel::~NatsChannel() = default;

void NatsChannel::publish(std::string_view name, const RdmaMetadata& metadata,
                          std::chrono::milliseconds ttl) {
  impl_->publish(name, metadata, ttl);
}

RdmaMetadata NatsChannel::fetch(std::string_view name, std::chrono::milliseconds timeout) {
  return impl_->fetch(name, timeout);
}

void NatsChannel::withdraw(std::string_view name) { impl_->withdraw(name); }

RdmaMetadata NatsChannel::wait_for(std::string_view name, std::chrono::milliseconds timeout) {
  return impl_->wait_for(name, timeout);
}

std::vector<std::string> NatsChannel::list() { return impl_->list(); }

std::unique_ptr<Subscription> NatsChannel::serve(std::string_view prefix, RequestHandler handler) {
  return impl_->serve(prefix, std::move(handler));
}

void NatsChannel::request(std::string_view name, const RdmaMetadata& writable,
                          std::chrono::milliseconds timeout, std::stop_token abandon) {
  impl_->request(name, writable, timeout, std::move(abandon));
}

void NatsChannel::flush(std::chrono::milliseconds timeout) { impl_->flush(timeout); }

std::size_t NatsChannel::max_payload() const { return impl_->max_payload(); }

std::string NatsChannel::connected_url() const { return impl_->connected_url(); }

}  // namespace memwire::sideband
