#include "channel_rules.hpp"

#include "memwire/error.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::sideband::channel_rules {
namespace {

std::string quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

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
  throw Error(ErrorCode::InvalidMetadata,
              "metadata under " + quoted(name) + ": " + std::string(why));
}

RdmaMetadata metadata_under(std::string_view name, const std::string& document) {
  try {
    return RdmaMetadata::from_json(document);
  } catch (const Error& error) {
    invalid_metadata(name, error.message());
  } catch (const std::exception& error) {
    invalid_metadata(name, error.what());
  }
}

PoolMetadata pool_metadata_under(std::string_view name, const std::string& document) {
  auto invalid = [&](std::string_view why) {
    throw Error(ErrorCode::InvalidMetadata,
                "pool metadata under " + quoted(name) + ": " + std::string(why));
  };
  try {
    return PoolMetadata::from_json(document);
  } catch (const Error& error) {
    invalid(error.message());
  } catch (const std::exception& error) {
    invalid(error.what());
  }
  return PoolMetadata::from_json(document);  // not reached: `invalid` throws
}

}  // namespace memwire::sideband::channel_rules
