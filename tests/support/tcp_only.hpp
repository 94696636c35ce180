#pragma once
// Options of a connector that moves bytes over tcp alone, whatever else this host offers.

#include "memwire/connector_options.hpp"

namespace memwire::test_support {

inline ConnectorOptions tcp_only() {
  ConnectorOptions options;
  options.transports = {"tcp"};
  return options;
}

}  // namespace memwire::test_support
