#include "common/json_log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace memwire::services {
namespace {

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto seconds = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()) %
                std::chrono::seconds(1);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  auto length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + length, sizeof text - length, ".%06lldZ",
                static_cast<long long>(micros.count()));
  return text;
}

}  // namespace

void log_json(std::string_view level, std::string_view message, nlohmann::json fields) {
  nlohmann::ordered_json line{{"ts", timestamp()}, {"level", level}, {"msg", message}};
  if (fields.is_object()) {
    for (auto& [key, value] : fields.items()) line[key] = value;
  }
  auto text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace memwire::services
