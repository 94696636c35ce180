#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/device.hpp"
#include "memwire/error.hpp"
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

// Error{InvalidMetadata} about one value of a metadata document (docs/PROTOCOL.md), with its
// place as data: field() is its path ("descriptors[2].size", "endpoint.transports[0].keys",
// "regions[1].base"), empty when the text as a whole is wrong (not JSON, nested too deeply, too
// large); reason() says what is wrong. what() is "invalid metadata: [<document> ]field '<path>':
// <reason>", or "invalid metadata: [<document>: ]<reason>" without a field.
class MEMWIRE_API MetadataError : public Error {
 public:
  // `document`: "" for one-shot metadata, "pool metadata" for a pool's.
  MetadataError(std::string_view document, std::string field, std::string reason);
  const std::string& field() const noexcept { return detail_->field; }
  const std::string& reason() const noexcept { return detail_->reason; }

 private:
  struct Detail {
    std::string field, reason;
  };
  std::shared_ptr<const Detail> detail_;  // shared: copying an exception must not throw
};

// What a passive operation hands out over a sideband so that a remote can read or write it.
// JSON keeps nixl_connect's field names and adds version, endpoint, token and expires_at.
class MEMWIRE_API RdmaMetadata {
 public:
  // What the metadata says, by name: RdmaMetadata({.kind = ..., .descriptors = ..., ...}).
  struct Fields {
    OperationKind kind = OperationKind::Read;
    std::vector<RemoteDescriptor> descriptors;
    std::string notification_key;
    Endpoint endpoint;
    std::string token;
    std::int64_t expires_at_ms = 0;  // unix ms, 0 = never
    friend bool operator==(const Fields&, const Fields&) = default;
  };

  static constexpr int kVersion = 1;
  // Bounds from_json enforces: more bytes than this in all descriptors together (larger than
  // any one device's memory today; a reader allocates what the metadata declares), more
  // descriptors, or deeper nesting than a document of this shape has, are InvalidMetadata.
  static constexpr std::uint64_t kMaxTotalSize = std::uint64_t(1) << 38;  // 256 GiB
  static constexpr std::size_t kMaxDescriptors = 65536;
  static constexpr std::size_t kMaxDepth = 16;

  explicit RdmaMetadata(Fields fields) : fields_(std::move(fields)) {}

  // Strict: unknown fields, wrong types, missing fields, empty descriptor list, null pointer,
  // unknown kind, empty key, malformed endpoint or a newer version throw MetadataError naming
  // the field; text that is not JSON throws MetadataError without one.
  static RdmaMetadata from_json(std::string_view json);
  std::string to_json() const;

  // All of it, to build another that differs in a field.
  const Fields& fields() const noexcept { return fields_; }
  OperationKind operation_kind() const noexcept { return fields_.kind; }
  const std::vector<RemoteDescriptor>& descriptors() const noexcept { return fields_.descriptors; }
  const std::string& notification_key() const noexcept { return fields_.notification_key; }
  const Endpoint& endpoint() const noexcept { return fields_.endpoint; }
  const std::string& token() const noexcept { return fields_.token; }
  std::int64_t expires_at_ms() const noexcept { return fields_.expires_at_ms; }
  std::uint64_t total_size() const noexcept;

  friend bool operator==(const RdmaMetadata&, const RdmaMetadata&) = default;

 private:
  Fields fields_;
};

}  // namespace memwire
