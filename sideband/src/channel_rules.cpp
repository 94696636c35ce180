#include "channel_rules.hpp"

#include "memwire/error.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::sideband::channel_rules {
namespace {

std::string quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

// "<what> under '<name>': <why>"
[[noreturn]] void invalid(std::string_view what, std::string_view name, std::string_view why) {
  throw Error(ErrorCode::InvalidMetadata,
              std::string(what) + " under " + quoted(name) + ": " + std::string(why));
}

// `Metadata::from_json(document)`, its failure worded as invalid() words it.
template <class Metadata>
Metadata parsed_under(std::string_view what, std::string_view name, const std::string& document) {
  try {
    return Metadata::from_json(document);
  } catch (const Error& error) {
    invalid(what, name, error.message());
  } catch (const std::exception& error) {
    invalid(what, name, error.what());
  }
}

}  // namespace

void check_name(std::string_view name) { validate_name(name); }

void check_prefix(std::string_view prefix) {
  if (!prefix.empty()) validate_name(prefix);
}

void check_publish(std::string_view name, std::chrono::milliseconds ttl) {
  validate_name(name);
  if (ttl.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, "publish " + quoted(name) + ": negative TTL (" +
                                                std::to_string(ttl.count()) + " ms)");
  }
}

std::string checked_pool_document(std::string_view name, const PoolMetadata& metadata,
                                  std::chrono::milliseconds ttl) {
  check_publish(name, ttl);
  auto json = metadata.to_json();
  if (json.size() > PoolMetadata::kMaxJsonBytes) {
    throw Error(ErrorCode::InvalidArgument, "publish pool " + quoted(name) + ": metadata of " +
                                                std::to_string(json.size()) + " bytes (at most " +
                                                std::to_string(PoolMetadata::kMaxJsonBytes) + ")");
  }
  return json;
}

void check_request(std::string_view name, const RdmaMetadata& writable) {
  validate_name(name);
  if (writable.operation_kind() != OperationKind::Write) {
    throw Error(ErrorCode::Pairing,
                "request " + quoted(name) + ": the metadata must be a writable operation's");
  }
}

void invalid_metadata(std::string_view name, std::string_view why) {
  invalid("metadata", name, why);
}

RdmaMetadata metadata_under(std::string_view name, const std::string& document) {
  return parsed_under<RdmaMetadata>("metadata", name, document);
}

PoolMetadata pool_metadata_under(std::string_view name, const std::string& document) {
  return parsed_under<PoolMetadata>("pool metadata", name, document);
}

}  // namespace memwire::sideband::channel_rules
