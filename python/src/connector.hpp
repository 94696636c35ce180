#pragma once

// The connector as Python makes it: options from a plain config, ended without the GIL.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "interpreter.hpp"
#include "memwire/memwire.hpp"

namespace memwire_python {

struct ConnectorConfig {
  std::string name;
  std::string bind_address;
  int port = 0;
  std::vector<std::string> transports;
  std::int64_t metadata_ttl_ms = -1;
  std::int64_t connect_timeout_ms = -1;
  int shm_direct_reads = -1;       // -1: the default (or MEMWIRE_SHM_DIRECT_READS)
  std::int64_t busy_poll_us = -1;  // -1: the default (or MEMWIRE_BUSY_POLL_US)
  bool from_environment = true;
};

class PyConnector {
 public:
  explicit PyConnector(const ConnectorConfig& config) {
    memwire::ConnectorOptions options;
    if (config.from_environment) options = memwire::ConnectorOptions::from_environment();
    if (!config.name.empty()) options.name = config.name;
    if (!config.bind_address.empty()) options.bind_address = config.bind_address;
    if (config.port < 0 || config.port > 65535)
      throw memwire::Error(memwire::ErrorCode::InvalidArgument, "port must be 0..65535");
    if (config.port != 0) options.port = static_cast<std::uint16_t>(config.port);
    if (!config.transports.empty()) options.transports = config.transports;
    if (config.metadata_ttl_ms >= 0) options.metadata_ttl = milliseconds(config.metadata_ttl_ms);
    if (config.connect_timeout_ms > 0)
      options.connect_timeout = milliseconds(config.connect_timeout_ms);
    if (config.shm_direct_reads >= 0) options.shm.direct_reads = config.shm_direct_reads != 0;
    if (config.busy_poll_us >= 0)
      options.stream.busy_poll = std::chrono::microseconds(config.busy_poll_us);
    connector_ = without_gil([&] { return std::make_shared<memwire::Connector>(options); });
  }
  ~PyConnector() {
    without_gil([&] {
      connector_.reset();
      return 0;
    });
  }
  PyConnector(const PyConnector&) = delete;
  PyConnector& operator=(const PyConnector&) = delete;

  memwire::Connector& get() { return *connector_; }
  const std::shared_ptr<memwire::Connector>& shared() const { return connector_; }

 private:
  std::shared_ptr<memwire::Connector> connector_;
};

}  // namespace memwire_python
