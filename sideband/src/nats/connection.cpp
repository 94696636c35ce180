#include "connection.hpp"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "memwire/error.hpp"

namespace memwire::sideband::nats_detail {

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

namespace {

// Room left in a message for the entry's own fields and for headers nats.c or JetStream add.
constexpr std::size_t kHeadroom = 4096;

void deliver_update(natsConnection*, natsSubscription*, natsMsg* raw, void* closure) {
  MsgPtr message(raw);
  auto& waiter = **static_cast<std::shared_ptr<Waiter>*>(closure);
  std::lock_guard lock(waiter.mutex);
  waiter.updates.push_back(std::move(message));
  waiter.changed.notify_all();
}

void release_waiter(void* closure) { delete static_cast<std::shared_ptr<Waiter>*>(closure); }

// Connection events, kept alive until nats.c reports the connection closed: its callbacks run
// on a library thread and may come after the channel began to go away.
}  // namespace

struct ConnectionEvents {
  std::function<void()> on_disconnected;
  std::function<void()> on_reconnected;
  std::mutex mutex;
  std::condition_variable changed;
  bool closed = false;
  std::vector<std::weak_ptr<Waiter>> waiters;  // told to recheck after a reconnect
  // The server's "Permissions Violation" errors: they come apart from the call that drew
  // them, which then only times out.
  std::uint64_t refusals = 0;
  std::string last_refusal;
};

namespace {

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

void on_async_error(natsConnection*, natsSubscription*, natsStatus status, void* closure) {
  if (status != NATS_NOT_PERMITTED) return;
  auto& events = **static_cast<std::shared_ptr<ConnectionEvents>*>(closure);
  // The server's own words sit in the connection's last-error buffer, which nats.c's reader
  // thread rewrites under a lock this callback cannot take (a second refusal right behind the
  // first raced with the copy, TSan in CI): the refusal is told in fixed words.
  std::lock_guard lock(events.mutex);
  ++events.refusals;
  events.last_refusal =
      "Permissions Violation: the NATS server refused this user a publish or subscribe (its log "
      "names the subject)";
}

void on_closed(natsConnection*, void* closure) {
  auto* holder = static_cast<std::shared_ptr<ConnectionEvents>*>(closure);
  std::shared_ptr<ConnectionEvents> events = std::move(*holder);
  delete holder;
  std::lock_guard lock(events->mutex);
  events->closed = true;
  events->changed.notify_all();
}

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

// NatsOptions::inbox_prefix, or its default: "_INBOX_<user>" with the user made one subject
// token, so that each user can be allowed its own replies only; nats.c's "_INBOX" without one.
std::string inbox_prefix_of(const NatsOptions& options) {
  if (!options.inbox_prefix.empty()) {
    try {
      validate_name(options.inbox_prefix);
    } catch (const Error& e) {
      throw Error(ErrorCode::InvalidArgument, std::string("nats: inbox_prefix: ") + e.what());
    }
    return options.inbox_prefix;
  }
  if (options.user.empty()) return "_INBOX";
  std::string prefix = "_INBOX_";
  for (char c : options.user.substr(0, 128)) {
    const bool token_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '_' || c == '-';
    prefix += token_char ? c : '_';
  }
  return prefix;
}

}  // namespace

SubscriptionPtr subscribe_waiter(natsConnection* connection, const std::string& subject,
                                 const std::shared_ptr<Waiter>& waiter, const std::string& what) {
  auto* closure = new std::shared_ptr<Waiter>(waiter);
  natsSubscription* raw = nullptr;
  auto status =
      natsConnection_Subscribe(&raw, connection, subject.c_str(), deliver_update, closure);
  if (status != NATS_OK) {
    delete closure;
    fail(status, what);
  }
  SubscriptionPtr subscription(raw);
  // Failure means the connection closed already; the closure then stays (a few bytes) rather
  // than risk freeing it under a callback.
  natsSubscription_SetOnCompleteCB(raw, release_waiter, closure);
  return subscription;
}

NatsConnection::NatsConnection(NatsOptions options) : options_(std::move(options)) {
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
  if (options_.kv_replicas < 0 || options_.kv_replicas > 5) {
    throw Error(ErrorCode::InvalidArgument, "nats: kv_replicas must be 1..5 (0 = automatic), not " +
                                                std::to_string(options_.kv_replicas));
  }
  options_.servers = split_server_lists(options_.servers);
  if (options_.servers.empty()) {
    throw Error(ErrorCode::InvalidArgument, "nats: no server URL given");
  }
  if (options_.kv_max_age.count() != 0 && options_.kv_max_age < std::chrono::milliseconds(100)) {
    throw Error(ErrorCode::InvalidArgument, "nats: kv_max_age must be 0 or at least 100 ms");
  }
  validate_name(options_.subject_prefix);
  inbox_prefix_ = inbox_prefix_of(options_);
  connect();
  try {
    jsOptions js_options;
    jsOptions_Init(&js_options);
    js_options.Wait = to_millis(options_.request_timeout);
    jsCtx* raw_js = nullptr;
    auto status = natsConnection_JetStream(&raw_js, connection_.get(), &js_options);
    js_.reset(raw_js);
    if (status != NATS_OK) fail(status, "nats: JetStream context");
  } catch (...) {
    close();
    throw;
  }
}

NatsConnection::~NatsConnection() { close(); }

std::size_t NatsConnection::max_payload() const {
  auto limit = natsConnection_GetMaxPayload(connection_.get());
  return limit > 0 ? static_cast<std::size_t>(limit) : std::size_t{1} << 20;
}

// The largest entry we send in one message.
std::size_t NatsConnection::max_entry() const {
  auto limit = max_payload();
  return limit > 2 * kHeadroom ? limit - kHeadroom : limit / 2;
}

std::uint64_t NatsConnection::permission_refusals() const {
  std::lock_guard lock(events_->mutex);
  return events_->refusals;
}

std::string NatsConnection::last_permission_refusal() const {
  std::lock_guard lock(events_->mutex);
  return events_->last_refusal;
}

void NatsConnection::flush(std::chrono::milliseconds timeout) {
  auto status = natsConnection_FlushTimeout(connection_.get(), to_millis(timeout));
  if (status != NATS_OK) fail(status, "nats: flush");
}

std::string NatsConnection::new_inbox() const {
  natsInbox* raw = nullptr;
  auto status = natsInbox_Create(&raw);
  if (status != NATS_OK) fail(status, "nats: new inbox");
  InboxPtr inbox(raw);
  // natsInbox_Create gives "_INBOX.<unique>": keep the unique token under our prefix.
  std::string_view unique = inbox.get();
  unique.remove_prefix(unique.find('.') + 1);
  return inbox_prefix_ + "." + std::string(unique);
}

std::string NatsConnection::connected_url() const {
  char buffer[512] = {};
  if (natsConnection_GetConnectedUrl(connection_.get(), buffer, sizeof(buffer)) != NATS_OK) {
    return {};
  }
  return buffer;
}

void NatsConnection::recheck_on_reconnect(const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(events_->mutex);
  std::erase_if(events_->waiters, [](const auto& weak) { return weak.expired(); });
  events_->waiters.push_back(waiter);
}

void NatsConnection::close() noexcept {
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

void NatsConnection::connect() {
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
    nkey_signer_ = std::make_unique<NkeySigner>(options_.nkey_seed_file);
    check(
        natsOptions_SetNKey(o, options_.nkey_public.c_str(), &NkeySigner::sign, nkey_signer_.get()),
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
  // Replies, JetStream answers and KV watch deliveries come under this prefix.
  check(natsOptions_SetCustomInboxPrefix(o, inbox_prefix_.c_str()), "inbox prefix");
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
  // One closure for the four callbacks, freed by the closed callback (the last one).
  auto* closure = new std::shared_ptr<ConnectionEvents>(events_);
  check(natsOptions_SetDisconnectedCB(o, on_disconnected, closure), "disconnected cb");
  check(natsOptions_SetReconnectedCB(o, on_reconnected, closure), "reconnected cb");
  check(natsOptions_SetClosedCB(o, on_closed, closure), "closed cb");
  check(natsOptions_SetErrorHandler(o, on_async_error, closure), "error handler");

  natsConnection* raw = nullptr;
  auto status = natsConnection_Connect(&raw, o);
  // A signature nats.c cannot send (see NkeySigner) is refused before it leaves; a new
  // connect brings a new nonce. Eight tries fail together once in 2^64.
  for (int tries = 1; status != NATS_OK && nkey_signer_ && tries < 8; ++tries) {
    if (!nkey_signer_->take_refused_signature()) break;
    status = natsConnection_Connect(&raw, o);
  }
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

}  // namespace memwire::sideband::nats_detail
