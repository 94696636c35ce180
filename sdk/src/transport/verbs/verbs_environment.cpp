// The verbs transport's own settings from the environment (MEMWIRE_RDMA_*, MEMWIRE_GID_INDEX).
#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "memwire/connector_options.hpp"
#include "util/environment.hpp"

namespace memwire::detail {

void read_verbs_environment(ConnectorOptions& options) {
  auto& rdma = options.rdma;
  if (const char* text = std::getenv("MEMWIRE_RDMA_DEVICE")) rdma.device = text;
  if (const char* text = std::getenv("MEMWIRE_RDMA_DEVICES"))
    rdma.devices = list_from_environment(text);
  if (const char* text = std::getenv("MEMWIRE_RDMA_ACCESS")) rdma.access = text;
  if (const char* text = std::getenv("MEMWIRE_RDMA_MAX_ACCESS_FAULTS"))
    rdma.max_access_faults =
        number_from_environment<unsigned>("MEMWIRE_RDMA_MAX_ACCESS_FAULTS", text);
  if (const char* text = std::getenv("MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS"))
    rdma.access_fault_window = std::chrono::milliseconds(
        number_from_environment<std::int64_t>("MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS", text));
  if (const char* text = std::getenv("MEMWIRE_RDMA_MAX_REMOTE_KEYS"))
    rdma.max_remote_keys =
        number_from_environment<std::size_t>("MEMWIRE_RDMA_MAX_REMOTE_KEYS", text);
  if (const char* text = std::getenv("MEMWIRE_RDMA_SLICE_SIZE"))
    rdma.slice_size = number_from_environment<std::size_t>("MEMWIRE_RDMA_SLICE_SIZE", text);
  if (const char* text = std::getenv("MEMWIRE_GID_INDEX"))
    rdma.gid_index = number_from_environment<int>("MEMWIRE_GID_INDEX", text);
}

}  // namespace memwire::detail
