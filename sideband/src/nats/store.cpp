#include "store.hpp"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "memwire/clock.hpp"
#include "memwire/error.hpp"

namespace memwire::sideband::nats_detail {
namespace {

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

}  // namespace

Store::Store(std::shared_ptr<NatsConnection> connection)
    : connection_(std::move(connection)), options_(connection_->options()) {
  const Deadline deadline(options_.request_timeout);
  const auto probed = wait_for_bucket(options_.kv_bucket, deadline);
  // Unanswered (or "no leader") for request_timeout: a leader election after a node died, or
  // a slow server. Each call opens it then, within its own deadline (`memwire get --timeout 20`
  // failed here after 5 s, in the middle of an election that ended well within its 20 s).
  if (probed == NATS_TIMEOUT || probed == NATS_ERR) return;
  kv_ = open_bucket(options_.kv_bucket, deadline, probed);
}

kvStore* Store::handle(Bucket bucket, Deadline deadline) {
  std::lock_guard lock(open_mutex_);
  auto& store = bucket == Bucket::Registry ? kv_ : parts_;
  if (!store) {
    const auto name =
        bucket == Bucket::Registry ? options_.kv_bucket : options_.kv_bucket + "_parts";
    store = open_bucket(name, deadline);
  }
  return store.get();
}

kvStore* Store::registry(Deadline deadline) { return handle(Bucket::Registry, deadline); }

kvStore* Store::parts_store(Deadline deadline) { return handle(Bucket::Parts, deadline); }

bool Store::election_may_cause(natsStatus status) noexcept {
  return status == NATS_TIMEOUT || status == NATS_ERR || status == NATS_NO_RESPONDERS;
}

natsStatus Store::get(Bucket bucket, const std::string& key, Deadline deadline, EntryPtr& entry) {
  return through_failover(bucket, deadline, [&](kvStore* store) {
    kvEntry* raw = nullptr;
    auto got = kvStore_Get(&raw, store, key.c_str());
    entry.reset(raw);
    return got;
  });
}

natsStatus Store::through_failover(Bucket bucket, Deadline deadline, const Call& call) {
  const auto refusals = connection_->permission_refusals();
  auto status = call(handle(bucket, deadline));
  auto pause = std::chrono::milliseconds(50);
  while (election_may_cause(status) && connection_->permission_refusals() == refusals &&
         deadline.left() > pause) {
    // No event says "leader elected": look again soon (backing off), each try bounded by the
    // deadline through a handle of its own (the bucket's waits are request_timeout long).
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
    jsOptions quick;
    jsOptions_Init(&quick);
    quick.Wait = std::clamp<std::int64_t>(deadline.left().count(), 1, 1000);
    jsCtx* raw_js = nullptr;
    status = natsConnection_JetStream(&raw_js, connection_->get(), &quick);
    JsPtr js(raw_js);
    if (status != NATS_OK) return status;
    const auto name =
        bucket == Bucket::Registry ? options_.kv_bucket : options_.kv_bucket + "_parts";
    kvStore* raw = nullptr;
    status = js_KeyValue(&raw, js.get(), name.c_str());
    KvPtr store(raw);
    // The bucket was open before: "not found" now is the election's doing too.
    if (status == NATS_NOT_FOUND) status = NATS_ERR;
    if (status == NATS_OK) status = call(store.get());
  }
  return status;
}

int Store::wanted_replicas() const {
  return options_.kv_replicas == 0 ? std::min(3, known_servers()) : options_.kv_replicas;
}

void Store::check_existing_bucket(kvStore* store, const std::string& bucket) {
  kvStatus* raw = nullptr;
  if (kvStore_Status(&raw, store) != NATS_OK) return;  // cannot tell: no reason to refuse
  const auto max_age = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(kvStatus_TTL(raw)));
  const auto replicas = kvStatus_Replicas(raw);
  kvStatus_Destroy(raw);
  const int wanted = wanted_replicas();
  if (replicas > 0 && replicas < wanted && options_.log) {
    // Names stay readable while the nodes holding the copies live: told, not refused.
    nlohmann::json line{
        {"level", "warn"},
        {"event", "kv_replicas_below_wanted"},
        {"bucket", bucket},
        {"replicas", replicas},
        {"wanted", wanted},
        {"msg", "the KV bucket '" + bucket + "' exists with " + std::to_string(replicas) + " cop" +
                    (replicas == 1 ? "y" : "ies") + " where this channel would make " +
                    std::to_string(wanted) + ": its names are lost with " +
                    (replicas == 1 ? std::string("the node that holds them")
                                   : "the nodes that hold them") +
                    "; raise its replicas (nats stream edit KV_" + bucket + " --replicas " +
                    std::to_string(wanted) + ")"}};
    options_.log(line.dump());
  }
  // A MaxAge shorter than this channel's (none, by default) drops names while their publishers
  // still think them published: refused, with what to do.
  if (max_age.count() <= 0) return;
  if (options_.kv_max_age.count() > 0 && max_age >= options_.kv_max_age) return;
  throw Error(
      ErrorCode::InvalidArgument,
      "nats: the KV bucket '" + bucket + "' drops every entry after " +
          std::to_string(max_age.count()) +
          " ms (its max age), sooner than this channel's kv_max_age (" +
          (options_.kv_max_age.count() > 0 ? std::to_string(options_.kv_max_age.count()) + " ms"
                                           : std::string("none")) +
          "): names would vanish while published; recreate the bucket, or set kv_max_age to " +
          std::to_string(max_age.count()) + " ms to accept that");
}

Envelope Store::envelope(const std::string& metadata_json, std::int64_t expires_at_ms,
                         std::string_view key, Deadline deadline) {
  Envelope envelope{encode_inline(metadata_json, expires_at_ms), {}};
  if (envelope.entry.size() > connection_->max_entry()) {
    envelope.part_key = std::string(key) + "." + random_key();
    auto parts = store_parts(envelope.part_key, metadata_json, deadline);
    envelope.entry = encode_parts(parts, envelope.part_key, metadata_json.size(), expires_at_ms);
  }
  return envelope;
}

// The servers this connection knows (given and discovered): the cluster's size, as far as a
// client can tell.
int Store::known_servers() const {
  char** servers = nullptr;
  int count = 0;
  if (natsConnection_GetServers(connection_->get(), &servers, &count) != NATS_OK) return 1;
  std::set<std::string> distinct;
  for (int i = 0; i < count; ++i) {
    distinct.insert(servers[i]);
    std::free(servers[i]);
  }
  std::free(servers);
  return std::max<int>(1, static_cast<int>(distinct.size()));
}

// While the bucket's stream (or JetStream's meta group) elects a leader after a node died, a
// request can go unanswered for its whole wait, or come back "offline". Asked with a short wait
// again and again (backing off) until request_timeout has passed, a new client gets in as soon
// as the election is over, not request_timeout after it began. No event says "leader elected".
natsStatus Store::wait_for_bucket(const std::string& bucket, Deadline deadline) {
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    jsOptions quick;
    jsOptions_Init(&quick);
    quick.Wait = std::clamp<std::int64_t>(deadline.left().count(), 1, 1000);
    jsCtx* raw_js = nullptr;
    auto status = natsConnection_JetStream(&raw_js, connection_->get(), &quick);
    JsPtr js(raw_js);
    if (status != NATS_OK) return status;
    kvStore* raw = nullptr;
    status = js_KeyValue(&raw, js.get(), bucket.c_str());
    KvPtr probe(raw);
    if ((status != NATS_TIMEOUT && status != NATS_ERR) || deadline.left() <= pause) return status;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

KvPtr Store::open_bucket(const std::string& bucket, Deadline deadline,
                         std::optional<natsStatus> probed) {
  kvStore* raw = nullptr;
  auto status = probed ? *probed : wait_for_bucket(bucket, deadline);
  // Opened for good with the connection's JetStream context (its waits are request_timeout).
  if (status == NATS_OK) {
    status = js_KeyValue(&raw, connection_->jetstream(), bucket.c_str());
    if (status == NATS_OK) {
      KvPtr existing(raw);
      check_existing_bucket(existing.get(), bucket);
      return existing;
    }
  }
  if (status == NATS_NOT_FOUND) {
    kvConfig config;
    kvConfig_Init(&config);
    config.Bucket = bucket.c_str();
    config.History = 1;
    // nats.c 3.4 passes TTL on as the stream's MaxAge: nanoseconds.
    config.TTL = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.kv_max_age).count();
    config.StorageType = js_FileStorage;
    // 0 = as many copies as the cluster has servers, up to 3: a cluster keeps its names when a
    // node dies without anyone having to ask for it.
    const bool automatic = options_.kv_replicas == 0;
    config.Replicas = wanted_replicas();
    status = js_CreateKeyValue(&raw, connection_->jetstream(), &config);
    if (status != NATS_OK && automatic && config.Replicas > 1) {
      // Servers that are not one JetStream cluster (two addresses of one server): one copy.
      config.Replicas = 1;
      status = js_CreateKeyValue(&raw, connection_->jetstream(), &config);
    }
    if (status != NATS_OK) {
      const std::string why = describe(status);
      // Another client may have created it in between.
      if (js_KeyValue(&raw, connection_->jetstream(), bucket.c_str()) != NATS_OK) {
        throw Error(status == NATS_TIMEOUT ? ErrorCode::Timeout : ErrorCode::Transport,
                    "nats: creating KV bucket '" + bucket + "': " + why);
      }
      status = NATS_OK;
    }
  }
  KvPtr store(raw);
  if (status == NATS_NO_RESPONDERS) {
    throw Error(
        ErrorCode::Transport,
        "nats: JetStream is not enabled on the server (needed for the KV bucket '" + bucket + "')");
  }
  if (status != NATS_OK) fail(status, "nats: opening KV bucket '" + bucket + "'");
  return store;
}

std::string_view Store::value_of(kvEntry* entry) {
  const void* data = kvEntry_Value(entry);
  if (data == nullptr) return {};
  return {static_cast<const char*>(data), static_cast<std::size_t>(kvEntry_ValueLen(entry))};
}

std::size_t Store::store_parts(const std::string& part_key, const std::string& json,
                               Deadline deadline) {
  if (json.size() > kMaxMetadataBytes) {
    throw Error(ErrorCode::InvalidArgument, "nats: metadata of " + std::to_string(json.size()) +
                                                " bytes exceeds the " +
                                                std::to_string(kMaxMetadataBytes) + "-byte limit");
  }
  const std::size_t piece = connection_->max_entry();
  const std::size_t parts = (json.size() + piece - 1) / piece;
  for (std::size_t i = 0; i < parts; ++i) {
    const std::string key = part_key + "." + std::to_string(i);
    const std::size_t offset = i * piece;
    const std::size_t length = std::min(piece, json.size() - offset);
    auto status = through_failover(Bucket::Parts, deadline, [&](kvStore* store) {
      uint64_t revision = 0;
      return kvStore_Put(&revision, store, key.c_str(), json.data() + offset,
                         static_cast<int>(length));
    });
    if (status != NATS_OK) {
      delete_parts(part_key);
      fail(status, "nats: storing part " + std::to_string(i) + " of a large metadata");
    }
  }
  return parts;
}

void Store::delete_parts(const std::string& part_key) noexcept {
  try {
    kvStore* store = parts_store(Deadline(options_.request_timeout));
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

std::string Store::read_parts(const Entry& entry, std::string_view key, std::string_view name,
                              Deadline deadline) {
  if (!entry.part_key.starts_with(std::string(key) + "."))
    channel_rules::invalid_metadata(
        name, "its entry points at pieces stored under another name (" + entry.part_key + ")");
  const std::size_t piece_size = connection_->max_entry();
  const std::size_t parts_needed = (entry.size + piece_size - 1) / piece_size;
  if (entry.parts > parts_needed) {
    channel_rules::invalid_metadata(name, "its entry claims " + std::to_string(entry.parts) +
                                              " parts for " + std::to_string(entry.size) +
                                              " bytes (at most " + std::to_string(parts_needed) +
                                              " of " + std::to_string(piece_size) + " bytes each)");
  }
  std::string json;
  json.reserve(entry.size);
  for (std::size_t i = 0; i < entry.parts; ++i) {
    if (deadline.passed()) {
      throw Error(ErrorCode::Timeout, "nats: reading the parts of " + in_quotes(name) +
                                          " ran past the timeout (" + std::to_string(i) + " of " +
                                          std::to_string(entry.parts) + " read)");
    }
    const std::string key = entry.part_key + "." + std::to_string(i);
    EntryPtr piece;
    auto status = get(Bucket::Parts, key, deadline, piece);
    if (status == NATS_NOT_FOUND) {
      throw Error(ErrorCode::NotFound,
                  "nats: part " + std::to_string(i) + " of " + in_quotes(name) + " is gone");
    }
    if (status != NATS_OK) fail(status, "nats: reading part of " + in_quotes(name));
    json.append(value_of(piece.get()));
    if (json.size() > entry.size) break;
  }
  if (json.size() != entry.size) {
    channel_rules::invalid_metadata(name, "its parts add up to " + std::to_string(json.size()) +
                                              " bytes, not " + std::to_string(entry.size));
  }
  return json;
}

std::string Store::document_of(const Entry& entry, std::string_view key, std::string_view name,
                               bool may_retry, Deadline deadline) {
  if (entry.parts == 0) return entry.metadata_json;
  try {
    return read_parts(entry, key, name, deadline);
  } catch (const Error& error) {
    // A publish or withdraw replaced the pieces while we read them: ask the registry again.
    if (error.code() != ErrorCode::NotFound || !may_retry) throw;
  }
  return document_from_registry(key, name, /*may_retry=*/false, deadline);
}

std::string Store::document_from_registry(std::string_view key, std::string_view name,
                                          bool may_retry, Deadline deadline) {
  const std::string key_text(key);
  EntryPtr stored;
  auto status = get(Bucket::Registry, key_text, deadline, stored);
  if (status == NATS_NOT_FOUND) {
    throw Error(ErrorCode::NotFound, "nats: " + in_quotes(name) + " is not published");
  }
  if (status == NATS_NO_RESPONDERS) {
    throw Error(ErrorCode::Transport, "nats: JetStream is not available to read " +
                                          in_quotes(name) + " from the registry");
  }
  if (status != NATS_OK) fail(status, "nats: reading " + in_quotes(name) + " from the registry");
  auto entry = decode_entry(value_of(stored.get()), name);
  if (entry.expired(unix_now_ms())) {
    throw Error(ErrorCode::NotFound, "nats: " + in_quotes(name) + " has expired");
  }
  return document_of(entry, key, name, may_retry, deadline);
}

RdmaMetadata Store::resolve(const Entry& entry, std::string_view name, bool may_retry,
                            Deadline deadline) {
  return channel_rules::metadata_under(name, document_of(entry, name, name, may_retry, deadline));
}

RdmaMetadata Store::from_registry(std::string_view name, bool may_retry, Deadline deadline) {
  return channel_rules::metadata_under(name,
                                       document_from_registry(name, name, may_retry, deadline));
}

}  // namespace memwire::sideband::nats_detail
