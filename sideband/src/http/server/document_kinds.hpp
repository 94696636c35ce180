#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/server/metadata_store.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"

namespace memwire::sideband::http {

// The kinds of named document the registry serves: operations' metadata (/v1/metadata/NAME,
// stored under the name) and pools' (/v1/pools/NAME, stored under MetadataStore::pool_key).
// Each kind is checked by its own parser before it is stored.
struct DocumentKind {
  const char* route;
  const char* noun;  // in error messages
  std::string (*key)(std::string_view name);
  void (*check)(std::string_view body);  // throws Error{InvalidMetadata}
  std::size_t max_body;
};

inline constexpr DocumentKind kOperations{
    R"(/v1/metadata/([^/]+))", "name", [](std::string_view name) { return std::string(name); },
    [](std::string_view body) { RdmaMetadata::from_json(body); }, SIZE_MAX};
inline constexpr DocumentKind kPools{R"(/v1/pools/([^/]+))", "pool", &MetadataStore::pool_key,
                                     [](std::string_view body) { PoolMetadata::from_json(body); },
                                     PoolMetadata::kMaxJsonBytes};

}  // namespace memwire::sideband::http
