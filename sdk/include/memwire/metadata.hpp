#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/device.hpp"
#include "memwire/export.hpp"
#include "memwire/status.hpp"

namespace memwire {

// One remote descriptor as the metadata describes it. `ptr` is the owner's address: only the
// owner's transports interpret it, and only inside its registration.
struct MEMWIRE_API RemoteDescriptor {
  Device device;
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  friend bool operator==(const RemoteDescriptor&, const RemoteDescriptor&) = default;
};

// How to reach the owner over one transport ("tcp", "shm", "verbs", ...).
struct MEMWIRE_API TransportOffer {
  std::string name;
  std::string address;                            // e.g. "127.0.0.1:4711"
  std::vector<std::uint64_t> keys;                // per-descriptor keys (verbs rkeys), may be empty
  std::map<std::string, std::string> attributes;  // transport-specific extras
  friend bool operator==(const TransportOffer&, const TransportOffer&) = default;
};

struct MEMWIRE_API Endpoint {
  std::string connector;                   // the owner's connector name
  std::string host;                        // the owner's hostname
  std::vector<TransportOffer> transports;  // best first
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// What a passive operation hands out over a sideband so that a remote can read or write it.
// JSON keeps nixl_connect's field names and adds version, endpoint, token and expires_at.
class MEMWIRE_API RdmaMetadata {
 public:
  static constexpr int kVersion = 1;
  // Bounds from_json enforces: more bytes than this in all descriptors together (larger than
  // any one device's memory today; a reader allocates what the metadata declares), more
  // descriptors, or deeper nesting than a document of this shape has, are InvalidMetadata.
  static constexpr std::uint64_t kMaxTotalSize = std::uint64_t(1) << 38;  // 256 GiB
  static constexpr std::size_t kMaxDescriptors = 65536;
  static constexpr std::size_t kMaxDepth = 16;

  RdmaMetadata(OperationKind kind, std::vector<RemoteDescriptor> descriptors,
               std::string notification_key, Endpoint endpoint, std::string token,
               std::int64_t expires_at_ms);

  // Strict: unknown fields, wrong types, missing fields, empty descriptor list, null pointer,
  // unknown kind, empty key or malformed endpoint throw Error{InvalidMetadata} naming the field.
  static RdmaMetadata from_json(std::string_view json);
  std::string to_json() const;

  OperationKind operation_kind() const noexcept { return kind_; }
  const std::vector<RemoteDescriptor>& descriptors() const noexcept { return descriptors_; }
  const std::string& notification_key() const noexcept { return notification_key_; }
  const Endpoint& endpoint() const noexcept { return endpoint_; }
  const std::string& token() const noexcept { return token_; }
  std::int64_t expires_at_ms() const noexcept { return expires_at_ms_; }  // unix ms, 0 = never
  std::uint64_t total_size() const noexcept;

  friend bool operator==(const RdmaMetadata&, const RdmaMetadata&) = default;

 private:
  OperationKind kind_;
  std::vector<RemoteDescriptor> descriptors_;
  std::string notification_key_;
  Endpoint endpoint_;
  std::string token_;
  std::int64_t expires_at_ms_;
};

}  // namespace memwire
