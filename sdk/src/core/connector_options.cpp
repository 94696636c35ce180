#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "memwire/connector.hpp"
#include "memwire/error.hpp"
#include "transport/enabled_transports.hpp"
#include "util/environment.hpp"

namespace memwire {
namespace {

// One JSON line per call, written with one call: lines from several threads never interleave.
void log_to_stderr(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace

// Where memwire reads the environment: here, and each transport folder its own settings
// (read_<name>_environment, listed in kEnvironmentReaders).
ConnectorOptions ConnectorOptions::from_environment(ConnectorOptions options) {
  if (const char* text = std::getenv("MEMWIRE_TRANSPORTS")) {
    options.transports = detail::list_from_environment(text);
  }
  if (const char* text = std::getenv("MEMWIRE_BIND_ADDRESS")) options.bind_address = text;
  if (const char* text = std::getenv("MEMWIRE_ADVERTISE_ADDRESS")) options.advertise_address = text;
  if (const char* text = std::getenv("MEMWIRE_PORT"))
    options.port = detail::number_from_environment<std::uint16_t>("MEMWIRE_PORT", text);
  // Each transport folder reads its own settings (MEMWIRE_RDMA_*, MEMWIRE_TCP_*).
  for (const auto read : detail::kEnvironmentReaders)
    if (read != nullptr) read(options);
  if (const char* text = std::getenv("MEMWIRE_IO_THREADS"))
    options.stream.io_threads =
        detail::number_from_environment<unsigned>("MEMWIRE_IO_THREADS", text);
  if (const char* text = std::getenv("MEMWIRE_MAX_CONNECTIONS"))
    options.max_connections =
        detail::number_from_environment<unsigned>("MEMWIRE_MAX_CONNECTIONS", text);
  if (const char* text = std::getenv("MEMWIRE_MAX_CONNECTIONS_PER_PEER"))
    options.max_connections_per_peer =
        detail::number_from_environment<unsigned>("MEMWIRE_MAX_CONNECTIONS_PER_PEER", text);
  if (const char* text = std::getenv("MEMWIRE_CUDA_STAGING_LIMIT"))
    options.cuda_staging_limit =
        detail::number_from_environment<std::uint64_t>("MEMWIRE_CUDA_STAGING_LIMIT", text);
  if (const char* text = std::getenv("MEMWIRE_MAX_QUEUED_ANSWER_BYTES"))
    options.stream.max_queued_answer_bytes =
        detail::number_from_environment<std::size_t>("MEMWIRE_MAX_QUEUED_ANSWER_BYTES", text);
  const std::pair<const char*, unsigned StreamOptions::*> open_transfers[] = {
      {"MEMWIRE_MAX_OPEN_TRANSFERS", &StreamOptions::max_open_transfers},
      {"MEMWIRE_MAX_OPEN_TRANSFERS_PER_CONNECTION",
       &StreamOptions::max_open_transfers_per_connection},
      {"MEMWIRE_MAX_OPEN_TRANSFERS_PER_PEER", &StreamOptions::max_open_transfers_per_peer},
      {"MEMWIRE_MAX_OPEN_TRANSFERS_PER_USER", &StreamOptions::max_open_transfers_per_user},
      {"MEMWIRE_MAX_OPEN_SHARED_TRANSFERS", &StreamOptions::max_open_shared_transfers},
      {"MEMWIRE_MAX_SHARED_CONNECTIONS", &StreamOptions::max_shared_connections},
      {"MEMWIRE_MAX_HELLO_ONLY_CONNECTIONS", &StreamOptions::max_hello_only_connections}};
  for (const auto& [name, field] : open_transfers)
    if (const char* text = std::getenv(name))
      options.stream.*field = detail::number_from_environment<unsigned>(name, text);
  if (const char* text = std::getenv("MEMWIRE_IDLE_TIMEOUT_MS"))
    options.stream.idle_timeout = std::chrono::milliseconds(
        detail::number_from_environment<std::int64_t>("MEMWIRE_IDLE_TIMEOUT_MS", text));
  if (const char* text = std::getenv("MEMWIRE_HELLO_ONLY_TIMEOUT_MS"))
    options.stream.hello_only_timeout = std::chrono::milliseconds(
        detail::number_from_environment<std::int64_t>("MEMWIRE_HELLO_ONLY_TIMEOUT_MS", text));
  if (const char* text = std::getenv("MEMWIRE_BUSY_POLL_US"))
    options.stream.busy_poll = std::chrono::microseconds(
        detail::number_from_environment<std::uint32_t>("MEMWIRE_BUSY_POLL_US", text));
  if (const char* text = std::getenv("MEMWIRE_SHM_DIRECT_READS"))
    options.shm.direct_reads =
        detail::number_from_environment<unsigned>("MEMWIRE_SHM_DIRECT_READS", text) != 0;
  if (const char* text = std::getenv("MEMWIRE_LOG"); text && std::string_view(text) == "1")
    options.log = log_to_stderr;
  if (const char* text = std::getenv("MEMWIRE_LOG_LEVEL"); text && *text) {
    const auto level = parse_log_level(text);
    if (!level)
      throw Error(ErrorCode::InvalidArgument, std::string("MEMWIRE_LOG_LEVEL='") + text +
                                                  "' is not one of debug, info, warn, error");
    options.log_level = *level;
    if (!options.log) options.log = log_to_stderr;
  }
  return options;
}

ConnectorOptions ConnectorOptions::from_environment() {
  return from_environment(ConnectorOptions{});
}

}  // namespace memwire
