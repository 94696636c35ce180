#pragma once
// Options of a connector that moves bytes over one transport alone (tcp, shm...), whatever else
// this host offers.

#include <string>

#include "memwire/connector_options.hpp"

namespace memwire::test_support {

inline ConnectorOptions transport_only(const std::string& transport) {
  ConnectorOptions options;
  options.transports = {transport};
  return options;
}

inline ConnectorOptions tcp_only() { return transport_only("tcp"); }

}  // namespace memwire::test_support
