#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "memwire/connector.hpp"
#include "memwire/error.hpp"

namespace memwire {
namespace {

template <typename Number>
Number number_from(const char* variable, const char* text) {
  std::istringstream in(text);
  long long value = -1;
  if (!(in >> value) || !in.eof() || value < 0)
    throw Error(ErrorCode::InvalidArgument,
                std::string(variable) + "='" + text + "' is not a number");
  return static_cast<Number>(value);
}

// One JSON line per call, written with one call: lines from several threads never interleave.
void log_to_stderr(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace

// The one place memwire reads the environment.
ConnectorOptions ConnectorOptions::from_environment(ConnectorOptions options) {
  if (const char* text = std::getenv("MEMWIRE_TRANSPORTS")) {
    options.transports.clear();
    std::istringstream in(text);
    for (std::string name; std::getline(in, name, ',');)
      if (!name.empty()) options.transports.push_back(name);
  }
  if (const char* text = std::getenv("MEMWIRE_BIND_ADDRESS")) options.bind_address = text;
  if (const char* text = std::getenv("MEMWIRE_ADVERTISE_ADDRESS")) options.advertise_address = text;
  if (const char* text = std::getenv("MEMWIRE_PORT"))
    options.port = number_from<std::uint16_t>("MEMWIRE_PORT", text);
  if (const char* text = std::getenv("MEMWIRE_RDMA_DEVICE")) options.rdma.device = text;
  if (const char* text = std::getenv("MEMWIRE_RDMA_DEVICES")) {
    options.rdma.devices.clear();
    std::istringstream in(text);
    for (std::string name; std::getline(in, name, ',');)
      if (!name.empty()) options.rdma.devices.push_back(name);
  }
  if (const char* text = std::getenv("MEMWIRE_RDMA_ACCESS")) options.rdma.access = text;
  if (const char* text = std::getenv("MEMWIRE_RDMA_MAX_ACCESS_FAULTS"))
    options.rdma.max_access_faults = number_from<unsigned>("MEMWIRE_RDMA_MAX_ACCESS_FAULTS", text);
  if (const char* text = std::getenv("MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS"))
    options.rdma.access_fault_window = std::chrono::milliseconds(
        number_from<std::int64_t>("MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS", text));
  if (const char* text = std::getenv("MEMWIRE_RDMA_SLICE_SIZE"))
    options.rdma.slice_size = number_from<std::size_t>("MEMWIRE_RDMA_SLICE_SIZE", text);
  if (const char* text = std::getenv("MEMWIRE_GID_INDEX"))
    options.rdma.gid_index = number_from<int>("MEMWIRE_GID_INDEX", text);
  if (const char* text = std::getenv("MEMWIRE_TCP_CHUNK_SIZE"))
    options.tcp.chunk_size = number_from<std::size_t>("MEMWIRE_TCP_CHUNK_SIZE", text);
  if (const char* text = std::getenv("MEMWIRE_TCP_CONNECTIONS"))
    options.tcp.connections_per_peer = number_from<unsigned>("MEMWIRE_TCP_CONNECTIONS", text);
  if (const char* text = std::getenv("MEMWIRE_IO_THREADS"))
    options.io_threads = number_from<unsigned>("MEMWIRE_IO_THREADS", text);
  if (const char* text = std::getenv("MEMWIRE_MAX_CONNECTIONS"))
    options.max_connections = number_from<unsigned>("MEMWIRE_MAX_CONNECTIONS", text);
  if (const char* text = std::getenv("MEMWIRE_MAX_CONNECTIONS_PER_PEER"))
    options.max_connections_per_peer =
        number_from<unsigned>("MEMWIRE_MAX_CONNECTIONS_PER_PEER", text);
  if (const char* text = std::getenv("MEMWIRE_CUDA_STAGING_LIMIT"))
    options.cuda_staging_limit = number_from<std::uint64_t>("MEMWIRE_CUDA_STAGING_LIMIT", text);
  if (const char* text = std::getenv("MEMWIRE_MAX_QUEUED_ANSWER_BYTES"))
    options.max_queued_answer_bytes =
        number_from<std::size_t>("MEMWIRE_MAX_QUEUED_ANSWER_BYTES", text);
  if (const char* text = std::getenv("MEMWIRE_IDLE_TIMEOUT_MS"))
    options.idle_timeout =
        std::chrono::milliseconds(number_from<std::int64_t>("MEMWIRE_IDLE_TIMEOUT_MS", text));
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
