#pragma once

// The registry half of the NATS channel: publish, fetch, withdraw, wait_for, list. A live
// publisher answers for its names on "<prefix>.md.<name>"; the KV bucket keeps them durably.

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/sideband/channel.hpp"
#include "store.hpp"

namespace memwire::sideband::nats_detail {

struct Published;

class NatsRegistry final : public Registry {
 public:
  explicit NatsRegistry(std::shared_ptr<Store> store);
  ~NatsRegistry() override;  // unsubscribes the responders
  NatsRegistry(const NatsRegistry&) = delete;
  NatsRegistry& operator=(const NatsRegistry&) = delete;

  MEMWIRE_SIDEBAND_REGISTRY_OVERRIDES;  // memwire/sideband/channel.hpp

 private:
  // The JSON text stored under `key` once it is published (wait_for's loop).
  std::string wait_for_document(std::string_view key, std::string_view name,
                                std::chrono::milliseconds timeout, std::stop_token abandon);
  // Deletes `key` from the registry and its pieces; returns their part key (empty if none).
  std::string remove_from_registry(std::string_view key, std::string_view name);
  std::string install_responder(std::string_view name, const std::string& entry,
                                std::int64_t expires_at, const std::string& part_key);
  std::shared_ptr<Published> remove_responder(std::string_view name);

  std::shared_ptr<Store> store_;
  NatsConnection& connection_;
  std::string metadata_subject_;  // "<prefix>.md."
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Published>, std::less<>> published_;
};

}  // namespace memwire::sideband::nats_detail
