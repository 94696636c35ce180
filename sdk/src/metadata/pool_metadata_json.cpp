// A pool's metadata as JSON (docs/PROTOCOL.md, "Pool metadata"), read with the one-shot
// metadata's readers: the endpoint, key and token follow the same rules in both documents.
#include "memwire/pool_metadata.hpp"
#include "metadata/endpoint_fields.hpp"
#include "metadata/json_reader.hpp"
#include "util/json_writer.hpp"

namespace memwire::detail {
namespace {

// A valid document is 4 levels deep (request.runs[i]).
constexpr std::size_t kMaxDepth = 8;

constexpr std::pair<Access, std::string_view> kAccessNames[] = {
    {Access::Read, "read"}, {Access::Write, "write"}, {Access::ReadWrite, "read_write"}};

// One entry of "regions": a region, or `repeat` regions `step` bytes apart.
struct GroupRead {
  RemoteRegion region;
  std::optional<std::uint64_t> step, repeat;
};

template <auto member>
constexpr auto region_number = [](GroupRead& read, ondemand::value& value, const Path& path) {
  read.region.*member = unsigned_value(value, path);
};

constexpr Fields<GroupRead, 7> kGroupFields{{
    {"device", true,
     [](GroupRead& read, ondemand::value& value, const Path& path) {
       read.region.device = device_value(value, path);
     }},
    {"base", true, region_number<&RemoteRegion::base>},
    {"block_size", true, region_number<&RemoteRegion::block_size>},
    {"stride", true, region_number<&RemoteRegion::stride>},
    {"count", true, region_number<&RemoteRegion::count>},
    {"step", false,
     [](GroupRead& read, ondemand::value& value, const Path& path) {
       read.step = unsigned_value(value, path);
       if (*read.step == 0) invalid(path, "must be positive");
     }},
    {"repeat", false,
     [](GroupRead& read, ondemand::value& value, const Path& path) {
       read.repeat = unsigned_value(value, path);
       if (*read.repeat < 2) invalid(path, "must be at least 2");
     }},
}};
static_assert(well_formed(kGroupFields));

// Appends the regions of the group `at` in the list `where`, at most kMaxRegions in all.
void read_group(ondemand::value& value, const Path& where, const Path& at,
                std::vector<RemoteRegion>& regions) {
  GroupRead group;
  read_object(value, at, kGroupFields, group);
  if (group.step.has_value() != group.repeat.has_value())
    invalid(at.field(group.step ? "repeat" : "step"), "missing (step and repeat go together)");
  const std::uint64_t repeat = group.repeat.value_or(1), step = group.step.value_or(0);
  if (repeat > PoolMetadata::kMaxRegions - regions.size())
    invalid(where, "more than " + std::to_string(PoolMetadata::kMaxRegions) + " regions");
  for (std::uint64_t r = 0; r < repeat; ++r) {
    if (r > 0 && regions.back().base > UINT64_MAX - step)
      invalid(at.field("step"), "the regions wrap around");
    regions.push_back(group.region);
    group.region.base += step;
  }
}

constexpr Fields<RequestScope, 3> kRequestFields{{
    {"id", true,
     [](RequestScope& scope, ondemand::value& value, const Path& path) {
       scope.request = string_value(value, path, true);
     }},
    {"access", true,
     [](RequestScope& scope, ondemand::value& value, const Path& path) {
       const auto name = take(value.get_string(), path, "read, write or read_write");
       for (const auto& [access, text] : kAccessNames)
         if (name == text) return void(scope.access = access);
       invalid(path, "read, write or read_write");
     }},
    {"runs", true,
     [](RequestScope& scope, ondemand::value& value, const Path& path) {
       constexpr const char* kExpected = "must be [first block, count]";
       read_array(value, path, "must be an array", [&](ondemand::value& item, const Path& at) {
         if (scope.runs.size() == RequestScope::kMaxRuns)
           invalid(path, "more than " + std::to_string(RequestScope::kMaxRuns) + " runs");
         std::uint64_t numbers[2];
         if (read_array(item, at, kExpected, [&](ondemand::value& number, const Path& in) {
               if (in.index >= 2) invalid(at, kExpected);
               numbers[in.index] = unsigned_value(number, in);
             }) != 2)
           invalid(at, kExpected);
         scope.runs.push_back({numbers[0], numbers[1]});
       });
     }},
}};
static_assert(well_formed(kRequestFields));

struct DocumentRead {
  PoolMetadata::Fields fields;
  std::optional<RequestScope> scope;
};

constexpr Fields<DocumentRead, 8> kDocumentFields{{
    {"memwire_pool", true,
     [](DocumentRead&, ondemand::value& value, const Path& path) {
       version_value(value, path, PoolMetadata::kVersion);
     }},
    {"name", true,
     [](DocumentRead& read, ondemand::value& value, const Path& path) {
       read.fields.name = string_value(value, path, true);
     }},
    {"generation", true,
     [](DocumentRead& read, ondemand::value& value, const Path& path) {
       read.fields.generation = unsigned_value(value, path);
     }},
    {"regions", true,
     [](DocumentRead& read, ondemand::value& value, const Path& path) {
       if (read_array(value, path, "must be a non-empty array",
                      [&](ondemand::value& group, const Path& at) {
                        read_group(group, path, at, read.fields.regions);
                      }) == 0)
         invalid(path, "must be a non-empty array");
     }},
    {"key", true, read_id<&PoolMetadata::Fields::key>},
    {"token", true, read_id<&PoolMetadata::Fields::token>},
    {"endpoint", true, read_endpoint<&PoolMetadata::Fields::endpoint>},
    // Only in a request grant's metadata (Pool::grant).
    {"request", false,
     [](DocumentRead& read, ondemand::value& value, const Path& path) {
       read_object(value, path, kRequestFields, read.scope.emplace());
     }},
}};
static_assert(well_formed(kDocumentFields));

PoolMetadata parse_pool_metadata(std::string_view text, const Path& root) {
  DocumentRead read;
  {
    JsonText json({}, text, root, kMaxDepth);
    auto top = json.root_object();
    read_object(top, root, kDocumentFields, read);
    json.expect_end();
  }
  PoolMetadata parsed(std::move(read.fields));
  if (!read.scope) return parsed;
  auto token = parsed.token();
  return parsed.for_request(std::move(token), std::move(*read.scope));
}

}  // namespace
}  // namespace memwire::detail

namespace memwire {

PoolMetadata PoolMetadata::from_json(std::string_view text) {
  const auto root = detail::Path::root(detail::kPoolDocument);
  if (text.size() > kMaxJsonBytes)
    throw MetadataError(
        detail::kPoolDocument, "",
        std::to_string(text.size()) + " bytes (at most " + std::to_string(kMaxJsonBytes) + ")");
  return detail::read_document(text, root, detail::kMaxDepth, "memwire_pool", kVersion,
                               [&] { return detail::parse_pool_metadata(text, root); });
}

// Fields in name order, as the document always had them. Regions that differ only in their
// base, spaced evenly (a KV cache's layers in one allocation), are written as one group:
// {"base", "step", "repeat"} instead of one entry each.
std::string PoolMetadata::to_json() const {
  const auto& regions = fields_.regions;
  std::string out;
  out.reserve(256 + 128 * regions.size());
  JsonWriter json(out);
  json.begin_object().key("endpoint");
  detail::write_endpoint(json, fields_.endpoint);
  json.key("generation").value(fields_.generation).key("key").value(fields_.key);
  json.key("memwire_pool").value(kVersion).key("name").value(fields_.name);
  json.key("regions").begin_array();
  for (std::size_t i = 0; i < regions.size();) {
    const auto& first = regions[i];
    std::uint64_t repeat = 1, step = 0;
    if (i + 1 < regions.size() && regions[i + 1].base > first.base) {
      step = regions[i + 1].base - first.base;
      while (i + repeat < regions.size()) {
        const auto& next = regions[i + repeat];
        if (next.device != first.device || next.block_size != first.block_size ||
            next.stride != first.stride || next.count != first.count ||
            next.base != first.base + repeat * step)
          break;
        ++repeat;
      }
    }
    json.begin_object().key("base").value(first.base).key("block_size").value(first.block_size);
    json.key("count").value(first.count).key("device").value(first.device.to_string());
    if (repeat > 1) json.key("repeat").value(repeat).key("step").value(step);
    json.key("stride").value(first.stride).end_object();
    i += repeat;
  }
  json.end_array();
  if (scope_) {
    // A reader without request grants refuses the field by name ("unknown field").
    std::string_view access = "read_write";
    for (const auto& [value, name] : detail::kAccessNames)
      if (value == scope_->access) access = name;
    json.key("request").begin_object().key("access").value(access);
    json.key("id").value(scope_->request).key("runs").begin_array();
    for (const auto& run : scope_->runs)
      json.begin_array().value(run.first).value(run.count).end_array();
    json.end_array().end_object();
  }
  json.key("token").value(fields_.token).end_object();
  return out;
}

}  // namespace memwire
