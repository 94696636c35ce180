#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace memwire::services {

// One JSON object per line on stderr: {"ts": RFC 3339 UTC, "level", "msg", ...fields}.
// Thread-safe; lines never interleave.
void log_json(std::string_view level, std::string_view message,
              nlohmann::json fields = nlohmann::json::object());

}  // namespace memwire::services
