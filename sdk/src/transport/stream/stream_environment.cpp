// The stream transports' own settings from the environment (MEMWIRE_TCP_*: tcp and shm).
#include <cstddef>
#include <cstdlib>

#include "memwire/connector_options.hpp"
#include "util/environment.hpp"

namespace memwire::detail {

void read_stream_environment(ConnectorOptions& options) {
  if (const char* text = std::getenv("MEMWIRE_TCP_CHUNK_SIZE"))
    options.tcp.chunk_size = number_from_environment<std::size_t>("MEMWIRE_TCP_CHUNK_SIZE", text);
  if (const char* text = std::getenv("MEMWIRE_TCP_CONNECTIONS"))
    options.tcp.connections_per_peer =
        number_from_environment<unsigned>("MEMWIRE_TCP_CONNECTIONS", text);
}

}  // namespace memwire::detail
