#include "registry.hpp"

#include <algorithm>
#include <stop_token>
#include <utility>

#include "channel_rules.hpp"
#include "memwire/clock.hpp"
#include "memwire/error.hpp"

namespace memwire::sideband::nats_detail {

using namespace channel_rules;  // the checks and words every channel shares

namespace {

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
    expired = responder.expires_at_ms != 0 && unix_now_ms() >= responder.expires_at_ms;
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

Error timed_out(std::string_view name, std::chrono::milliseconds timeout) {
  return Error(ErrorCode::Timeout, "nats: " + in_quotes(name) + " was not published within " +
                                       std::to_string(timeout.count()) + " ms");
}

}  // namespace

struct Published {
  std::shared_ptr<Responder> responder;
  SubscriptionPtr subscription;
  std::string part_key;  // pieces of the current entry, if stored in parts
};

NatsRegistry::NatsRegistry(std::shared_ptr<Store> store)
    : store_(std::move(store)),
      connection_(*store_->connection()),
      metadata_subject_(connection_.options().subject_prefix + ".md.") {}

NatsRegistry::~NatsRegistry() {
  std::lock_guard lock(mutex_);
  published_.clear();  // destroying a subscription unsubscribes it
}

void NatsRegistry::publish(std::string_view name, const RdmaMetadata& metadata,
                           std::chrono::milliseconds ttl) {
  check_publish(name, ttl);
  const std::int64_t expires_at = ttl.count() > 0 ? unix_now_ms() + ttl.count() : 0;
  const std::string json = metadata.to_json();
  // No deadline of the caller's: request_timeout for the whole publish, retried through it.
  const Store::Deadline deadline(connection_.options().request_timeout);

  // Not a structured binding: the KV call below takes it into a lambda (clang 14 cannot).
  const Envelope envelope = store_->envelope(json, expires_at, name, deadline);
  const std::string& entry = envelope.entry;
  const std::string& part_key = envelope.part_key;

  // The responder first: the KV put below is a round trip on the same connection, so when
  // publish returns the server has the subscription and a fetch from anywhere is answered.
  std::string old_part_key;
  try {
    old_part_key = install_responder(name, entry, expires_at, part_key);
    const std::string key(name);
    auto status = store_->through_failover(Store::Bucket::Registry, deadline, [&](kvStore* kv) {
      uint64_t revision = 0;
      return kvStore_Put(&revision, kv, key.c_str(), entry.data(), static_cast<int>(entry.size()));
    });
    if (status != NATS_OK) fail(status, "nats: storing " + in_quotes(name) + " in the registry");
  } catch (...) {
    remove_responder(name);
    if (!part_key.empty()) store_->delete_parts(part_key);
    throw;
  }
  if (!old_part_key.empty() && old_part_key != part_key) store_->delete_parts(old_part_key);
}

RdmaMetadata NatsRegistry::fetch(std::string_view name, std::chrono::milliseconds timeout) {
  check_name(name);
  const Store::Deadline deadline(timeout);
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
      if (!entry.expired(unix_now_ms()))
        return store_->resolve(entry, name, /*may_retry=*/true, deadline);
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
  return store_->from_registry(name, /*may_retry=*/true, deadline);
}

void NatsRegistry::withdraw(std::string_view name) {
  check_name(name);
  auto published = remove_responder(name);
  const std::string registry_parts = remove_from_registry(name, name);
  if (published && !published->part_key.empty() && published->part_key != registry_parts) {
    store_->delete_parts(published->part_key);
  }
}

std::string NatsRegistry::remove_from_registry(std::string_view key, std::string_view name) {
  const std::string key_text(key);
  const Store::Deadline deadline(connection_.options().request_timeout);
  // What the registry holds now (another process may have written it), for its pieces.
  std::string registry_parts;
  EntryPtr current;
  auto status = store_->get(Store::Bucket::Registry, key_text, deadline, current);
  if (status == NATS_OK) {
    try {
      registry_parts = decode_entry(Store::value_of(current.get()), name).part_key;
    } catch (const Error&) {
      // A malformed entry is removed all the same.
    }
    // A KV delete leaves the usual tombstone, so other KV watchers see the name go.
    status = store_->through_failover(Store::Bucket::Registry, deadline, [&](kvStore* kv) {
      return kvStore_Delete(kv, key_text.c_str());
    });
    if (status != NATS_OK) {
      fail(status, "nats: deleting " + in_quotes(name) + " from the registry");
    }
  } else if (status != NATS_NOT_FOUND) {
    fail(status, "nats: reading " + in_quotes(name) + " from the registry");
  }
  if (!registry_parts.empty()) store_->delete_parts(registry_parts);
  return registry_parts;
}

// A plain subscription on the name's KV subject ($KV.<bucket>.<name>) sees every put as it
// is stored; reading the registry once it is in place covers what came before. Not
// kvStore_Watch: that creates a JetStream consumer per call (about 0.6 ms more, and one
// consumer per waiter on the server), and nats.c 3.4.1 can read freed memory when such a
// watcher is destroyed while its consumer is being recreated after a reconnect (seen under
// AddressSanitizer in the restart test).
RdmaMetadata NatsRegistry::wait_for(std::string_view name, std::chrono::milliseconds timeout,
                                    std::stop_token abandon) {
  check_name(name);
  return metadata_under(name, wait_for_document(name, name, timeout, std::move(abandon)));
}

std::string NatsRegistry::wait_for_document(std::string_view key, std::string_view name,
                                            std::chrono::milliseconds timeout,
                                            std::stop_token abandon) {
  const Store::Deadline deadline(timeout);
  // Already published (the usual case): no subscription needed.
  try {
    return store_->document_from_registry(key, name, /*may_retry=*/true, deadline);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::NotFound) throw;
  }
  auto waiter = std::make_shared<Waiter>();
  connection_.recheck_on_reconnect(waiter);
  bool abandoned = false;  // under waiter->mutex
  std::stop_callback on_abandon(abandon, [&] {
    std::lock_guard lock(waiter->mutex);
    abandoned = true;
    waiter->changed.notify_all();
  });
  const std::string subject = "$KV." + connection_.options().kv_bucket + "." + std::string(key);
  auto subscription =
      subscribe_waiter(connection_.get(), subject, waiter, "nats: watching " + in_quotes(name));
  // Once the server has the subscription, nothing published later can slip past us; then the
  // registry once more, for what came in between.
  auto status = natsConnection_FlushTimeout(connection_.get(), to_millis(deadline.left()));
  if (status == NATS_TIMEOUT) throw timed_out(name, timeout);
  if (status != NATS_OK) fail(status, "nats: watching " + in_quotes(name));

  for (bool check_registry = true;;) {
    if (check_registry) {
      try {
        return store_->document_from_registry(key, name, /*may_retry=*/true, deadline);
      } catch (const Error& error) {
        if (error.code() != ErrorCode::NotFound) throw;
      }
    }
    std::unique_lock lock(waiter->mutex);
    if (!waiter->changed.wait_until(lock, deadline.at(), [&] {
          return !waiter->updates.empty() || waiter->recheck || abandoned;
        })) {
      throw timed_out(name, timeout);
    }
    if (abandoned)
      throw Error(ErrorCode::Cancelled,
                  "wait for " + in_quotes(name) + ": abandoned by the caller");
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
    if (entry.expired(unix_now_ms())) continue;
    return store_->document_of(entry, key, name, /*may_retry=*/true, deadline);
  }
}

std::vector<std::string> NatsRegistry::list() {
  kvWatchOptions watch_options;
  kvWatchOptions_Init(&watch_options);
  watch_options.IgnoreDeletes = true;
  kvWatcher* raw_watcher = nullptr;
  auto status = kvStore_WatchAll(
      &raw_watcher, store_->registry(Store::Deadline(connection_.options().request_timeout)),
      &watch_options);
  WatcherPtr watcher(raw_watcher);
  if (status != NATS_OK) fail(status, "nats: listing the registry");

  std::vector<std::string> names;
  const auto now = unix_now_ms();
  for (;;) {
    kvEntry* raw = nullptr;
    status = kvWatcher_Next(&raw, watcher.get(), to_millis(connection_.options().request_timeout));
    EntryPtr update(raw);
    if (status != NATS_OK) fail(status, "nats: listing the registry");
    if (!update) break;  // the initial values are all in
    if (kvEntry_Operation(raw) != kvOp_Put) continue;
    const std::string name = kvEntry_Key(raw);
    if (name.starts_with(kPoolKeyPrefix)) continue;  // pools are not operations' names
    try {
      if (decode_entry(Store::value_of(raw), name).expired(now)) continue;
    } catch (const Error&) {
      // Listed all the same: fetching it reports what is wrong.
    }
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Pools have no live responder: they are published once and fetched once per peer, so the
// registry alone answers for them, under pool_key(name).
void NatsRegistry::publish_pool(std::string_view name, const PoolMetadata& metadata,
                                std::chrono::milliseconds ttl) {
  const std::string json = checked_pool_document(name, metadata, ttl);
  const std::int64_t expires_at = ttl.count() > 0 ? unix_now_ms() + ttl.count() : 0;
  const std::string key = pool_key(name);
  const Store::Deadline deadline(connection_.options().request_timeout);
  // The pieces of the entry this publish replaces, removed once the new one is stored.
  std::string old_part_key;
  {
    EntryPtr current;
    auto status = store_->get(Store::Bucket::Registry, key, deadline, current);
    if (status == NATS_OK) {
      try {
        old_part_key = decode_entry(Store::value_of(current.get()), name).part_key;
      } catch (const Error&) {
        // Malformed: replaced all the same.
      }
    }
  }
  const Envelope envelope = store_->envelope(json, expires_at, key, deadline);
  const std::string& entry = envelope.entry;
  const std::string& part_key = envelope.part_key;
  auto status = store_->through_failover(Store::Bucket::Registry, deadline, [&](kvStore* kv) {
    uint64_t revision = 0;
    return kvStore_Put(&revision, kv, key.c_str(), entry.data(), static_cast<int>(entry.size()));
  });
  if (status != NATS_OK) {
    if (!part_key.empty()) store_->delete_parts(part_key);
    fail(status, "nats: storing pool " + in_quotes(name) + " in the registry");
  }
  if (!old_part_key.empty() && old_part_key != part_key) store_->delete_parts(old_part_key);
}

PoolMetadata NatsRegistry::fetch_pool(std::string_view name, std::chrono::milliseconds timeout) {
  check_name(name);
  return pool_metadata_under(
      name, store_->document_from_registry(pool_key(name), name,
                                           /*may_retry=*/true, Store::Deadline(timeout)));
}

PoolMetadata NatsRegistry::wait_for_pool(std::string_view name, std::chrono::milliseconds timeout,
                                         std::stop_token abandon) {
  check_name(name);
  return pool_metadata_under(name,
                             wait_for_document(pool_key(name), name, timeout, std::move(abandon)));
}

void NatsRegistry::withdraw_pool(std::string_view name) {
  check_name(name);
  remove_from_registry(pool_key(name), name);
}

// Sets what the responder of `name` answers, subscribing it if needed. Returns the part key
// of the entry it replaces.
std::string NatsRegistry::install_responder(std::string_view name, const std::string& entry,
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

std::shared_ptr<Published> NatsRegistry::remove_responder(std::string_view name) {
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

}  // namespace memwire::sideband::nats_detail
