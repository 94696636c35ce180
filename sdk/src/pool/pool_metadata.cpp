#include <algorithm>
#include <nlohmann/json.hpp>

#include "memwire/error.hpp"
#include "memwire/pool.hpp"
#include "metadata/endpoint_json.hpp"
#include "util/ids.hpp"

namespace memwire {
namespace {

using nlohmann::json;

[[noreturn]] void invalid(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::InvalidMetadata, "pool metadata field '" + field + "': " + why);
}

const json& member(const json& object, const char* name, const std::string& where) {
  auto it = object.find(name);
  if (it == object.end()) invalid(where + name, "missing");
  return *it;
}

std::uint64_t unsigned_member(const json& object, const char* name, const std::string& where) {
  const auto& value = member(object, name, where);
  if (!value.is_number_unsigned()) invalid(where + name, "must be a non-negative integer");
  return value.get<std::uint64_t>();
}

void only_fields(const json& object, std::initializer_list<std::string_view> known,
                 const std::string& where) {
  if (!object.is_object()) invalid(where.empty() ? "(document)" : where, "must be an object");
  for (const auto& [name, value] : object.items())
    if (std::find(known.begin(), known.end(), name) == known.end())
      invalid(where + name, "unknown field");
}

// The end of a region's last block, or nullopt when it wraps around.
std::optional<std::uint64_t> span_of(const RemoteRegion& region) {
  if (region.count == 0 || region.block_size == 0) return std::nullopt;
  const auto last = region.count - 1;
  if (region.stride != 0 && last > (UINT64_MAX - region.block_size) / region.stride)
    return std::nullopt;
  return last * region.stride + region.block_size;
}

// Endpoint, key and token are checked by the one-shot metadata's parser, which already knows
// every rule for them: wrapped in a minimal document of its shape.
Endpoint checked_endpoint(const json& document) {
  json wrapped = {{"descriptors", json::array({{{"device", "cpu"}, {"ptr", 1}, {"size", 1}}})},
                  {"endpoint", member(document, "endpoint", "")},
                  {"expires_at", 0},
                  {"notification_key", member(document, "key", "")},
                  {"operation_kind", 1},
                  {"token", member(document, "token", "")},
                  {"version", RdmaMetadata::kVersion}};
  try {
    return RdmaMetadata::from_json(wrapped.dump()).endpoint();
  } catch (const Error& error) {
    std::string what = error.what();
    // Its field names are ours, but a key is "key" here.
    if (auto at = what.find("notification_key"); at != std::string::npos)
      what.replace(at, 16, "key");
    throw Error(ErrorCode::InvalidMetadata, "pool metadata " + what);
  }
}

const char* access_name(Access access) {
  switch (access) {
    case Access::Read:
      return "read";
    case Access::Write:
      return "write";
    default:
      return "read_write";
  }
}

// A request scope's rules, the same for the owner's grant and a peer's parse.
void check_scope(const RequestScope& scope, std::uint64_t block_count) {
  if (scope.request.empty() || scope.request.size() > 160 ||
      scope.request.find('\0') != std::string::npos)
    invalid("request.id", "1 to 160 bytes, no NUL");
  if (scope.access != Access::Read && scope.access != Access::Write &&
      scope.access != Access::ReadWrite)
    invalid("request.access", "read, write or read_write");
  if (scope.runs.empty() || scope.runs.size() > RequestScope::kMaxRuns)
    invalid("request.runs", "1 to " + std::to_string(RequestScope::kMaxRuns) + " runs");
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < scope.runs.size(); ++i) {
    const auto& run = scope.runs[i];
    const auto where = "request.runs[" + std::to_string(i) + "]";
    if (run.count == 0 || run.first > block_count || run.count > block_count - run.first)
      invalid(where, "empty, or past the pool's " + std::to_string(block_count) + " blocks");
    // Sorted and apart: consecutive blocks are one run (one verbs window).
    if (i > 0 && run.first <= next) invalid(where, "unsorted, overlapping or touching");
    next = run.first + run.count;
  }
}

}  // namespace

PoolMetadata PoolMetadata::for_request(std::string token, RequestScope scope) const {
  check_scope(scope, block_count_);
  PoolMetadata granted = *this;
  granted.token_ = std::move(token);
  granted.scope_.emplace(std::move(scope));
  return granted;
}

PoolMetadata::PoolMetadata(std::string name, std::uint64_t generation,
                           std::vector<RemoteRegion> regions, std::string key, Endpoint endpoint,
                           std::string token)
    : name_(std::move(name)),
      generation_(generation),
      regions_(std::move(regions)),
      key_(std::move(key)),
      endpoint_(std::move(endpoint)),
      token_(std::move(token)) {
  if (regions_.empty()) invalid("regions", "a pool has at least one region");
  if (regions_.size() > kMaxRegions)
    invalid("regions", std::to_string(regions_.size()) + " regions (at most " +
                           std::to_string(kMaxRegions) + ")");
  std::uint64_t bytes = 0;
  first_block_.reserve(regions_.size());
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    auto& region = regions_[i];
    const auto where = "regions[" + std::to_string(i) + "]";
    if (region.stride == 0) region.stride = region.block_size;
    if (region.base == 0) invalid(where + ".base", "must not be null");
    if (region.stride < region.block_size)
      invalid(where + ".stride", "smaller than the block size: blocks would overlap");
    const auto span = span_of(region);
    if (!span) invalid(where, "needs blocks of at least one byte, and must not wrap around");
    if (region.base > UINT64_MAX - *span) invalid(where + ".base", "the region wraps around");
    first_block_.push_back(block_count_);
    block_count_ += region.count;
    if (block_count_ > kMaxBlocks)
      invalid("regions", "more than " + std::to_string(kMaxBlocks) + " blocks");
    bytes += region.count * region.block_size;
    if (bytes > kMaxTotalSize || bytes < region.count * region.block_size)  // or wrapped
      invalid("regions", "more than " + std::to_string(kMaxTotalSize) + " bytes of blocks");
  }
  if (name_.size() > 256) invalid("name", "longer than 256 bytes");
}

PoolMetadata::Place PoolMetadata::locate(std::uint64_t block) const {
  if (block >= block_count_)
    throw Error(ErrorCode::InvalidArgument, "block " + std::to_string(block) + " past the pool's " +
                                                std::to_string(block_count_) + " blocks");
  const auto region = static_cast<std::uint32_t>(
      std::upper_bound(first_block_.begin(), first_block_.end(), block) - first_block_.begin() - 1);
  const auto& geometry = regions_[region];
  return {region, (block - first_block_[region]) * geometry.stride, geometry.block_size};
}

// Regions that differ only in their base, spaced evenly (a KV cache's layers in one
// allocation), are written as one group: {"base", "step", "repeat"} instead of one entry each.
std::string PoolMetadata::to_json() const {
  json groups = json::array();
  for (std::size_t i = 0; i < regions_.size();) {
    const auto& first = regions_[i];
    std::size_t repeat = 1;
    std::uint64_t step = 0;
    if (i + 1 < regions_.size() && regions_[i + 1].base > first.base) {
      step = regions_[i + 1].base - first.base;
      while (i + repeat < regions_.size()) {
        const auto& next = regions_[i + repeat];
        if (next.device != first.device || next.block_size != first.block_size ||
            next.stride != first.stride || next.count != first.count ||
            next.base != first.base + repeat * step)
          break;
        ++repeat;
      }
    }
    json group = {{"device", first.device.to_string()},
                  {"base", first.base},
                  {"block_size", first.block_size},
                  {"stride", first.stride},
                  {"count", first.count}};
    if (repeat > 1) {
      group["step"] = step;
      group["repeat"] = repeat;
    }
    groups.push_back(std::move(group));
    i += repeat;
  }
  json document{{"memwire_pool", kVersion},
                {"name", name_},
                {"generation", generation_},
                {"regions", std::move(groups)},
                {"key", key_},
                {"token", token_},
                {"endpoint", detail::endpoint_json(endpoint_)}};
  if (scope_) {
    // A reader without request grants refuses the field by name ("unknown field").
    json runs = json::array();
    for (const auto& run : scope_->runs) runs.push_back({run.first, run.count});
    document["request"] = {{"id", scope_->request},
                           {"access", access_name(scope_->access)},
                           {"runs", std::move(runs)}};
  }
  return document.dump();
}

PoolMetadata PoolMetadata::from_json(std::string_view text) {
  if (text.size() > kMaxJsonBytes)
    throw Error(ErrorCode::InvalidMetadata, "pool metadata of " + std::to_string(text.size()) +
                                                " bytes (at most " + std::to_string(kMaxJsonBytes) +
                                                ")");
  json document;
  try {
    // Deep nesting is refused before it costs a stack: a valid document is 4 levels deep.
    int depth = 0;
    document = json::parse(text, [&](int level, json::parse_event_t, json&) {
      depth = std::max(depth, level);
      if (depth > 8) throw Error(ErrorCode::InvalidMetadata, "pool metadata nested too deeply");
      return true;
    });
  } catch (const json::exception& error) {
    throw Error(ErrorCode::InvalidMetadata,
                std::string("pool metadata is not JSON: ") + error.what());
  }
  only_fields(
      document,
      {"memwire_pool", "name", "generation", "regions", "key", "token", "endpoint", "request"}, "");
  const auto version = unsigned_member(document, "memwire_pool", "");
  if (version != kVersion)
    invalid("memwire_pool", "version " + std::to_string(version) + ", this build reads " +
                                std::to_string(kVersion));
  const auto& name = member(document, "name", "");
  if (!name.is_string()) invalid("name", "must be a string");
  const auto generation = unsigned_member(document, "generation", "");
  const auto& groups = member(document, "regions", "");
  if (!groups.is_array() || groups.empty()) invalid("regions", "must be a non-empty array");
  std::vector<RemoteRegion> regions;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto where = "regions[" + std::to_string(g) + "].";
    const auto& group = groups[g];
    only_fields(group, {"device", "base", "block_size", "stride", "count", "step", "repeat"},
                where);
    const auto& device = member(group, "device", where);
    if (!device.is_string()) invalid(where + "device", "must be a string");
    RemoteRegion region;
    try {
      region.device = Device::parse(device.get<std::string>());
    } catch (const Error& error) {
      invalid(where + "device", error.what());
    }
    region.base = unsigned_member(group, "base", where);
    region.block_size = unsigned_member(group, "block_size", where);
    region.stride = unsigned_member(group, "stride", where);
    region.count = unsigned_member(group, "count", where);
    std::uint64_t repeat = 1, step = 0;
    if (group.contains("repeat") || group.contains("step")) {
      repeat = unsigned_member(group, "repeat", where);
      step = unsigned_member(group, "step", where);
      if (repeat < 2) invalid(where + "repeat", "must be at least 2");
      if (step == 0) invalid(where + "step", "must be positive");
    }
    if (repeat > kMaxRegions - regions.size())
      invalid("regions", "more than " + std::to_string(kMaxRegions) + " regions");
    for (std::uint64_t r = 0; r < repeat; ++r) {
      if (r > 0 && regions.back().base > UINT64_MAX - step)
        invalid(where + "step", "the regions wrap around");
      regions.push_back(region);
      region.base += step;
    }
  }
  auto endpoint = checked_endpoint(document);
  PoolMetadata parsed(name.get<std::string>(), generation, std::move(regions),
                      member(document, "key", "").get<std::string>(), std::move(endpoint),
                      member(document, "token", "").get<std::string>());
  if (!document.contains("request")) return parsed;
  const auto& request = document["request"];
  only_fields(request, {"id", "access", "runs"}, "request.");
  RequestScope scope;
  const auto& id = member(request, "id", "request.");
  const auto& access = member(request, "access", "request.");
  const auto& runs = member(request, "runs", "request.");
  if (!id.is_string()) invalid("request.id", "must be a string");
  scope.request = id.get<std::string>();
  if (access == "read")
    scope.access = Access::Read;
  else if (access == "write")
    scope.access = Access::Write;
  else if (access == "read_write")
    scope.access = Access::ReadWrite;
  else
    invalid("request.access", "read, write or read_write");
  if (!runs.is_array() || runs.size() > RequestScope::kMaxRuns)
    invalid("request.runs",
            "must be an array of at most " + std::to_string(RequestScope::kMaxRuns) + " runs");
  for (const auto& run : runs) {
    if (!run.is_array() || run.size() != 2 || !run[0].is_number_unsigned() ||
        !run[1].is_number_unsigned())
      invalid("request.runs", "each run is [first block, count]");
    scope.runs.push_back({run[0].get<std::uint64_t>(), run[1].get<std::uint64_t>()});
  }
  auto token = parsed.token();
  return parsed.for_request(std::move(token), std::move(scope));
}

}  // namespace memwire
