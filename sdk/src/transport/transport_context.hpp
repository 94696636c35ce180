#pragma once

#include <memory>
#include <string>

#include "memwire/connector_options.hpp"
#include "telemetry/event_log.hpp"
#include "telemetry/telemetry_recorder.hpp"

namespace memwire::detail {

class RegistrationTable;
class TransferBudget;

// What every transport of one connector shares.
struct TransportContext {
  std::string connector_name;
  std::string hostname;
  ConnectorOptions options;
  std::shared_ptr<RegistrationTable> registrations;
  std::shared_ptr<TelemetryRecorder> telemetry;  // null when telemetry is off
  std::shared_ptr<const EventLog> events;        // never null
  // The tagged pool transfers peers hold open on the connector's stream transports; never null.
  std::shared_ptr<TransferBudget> transfer_budget;
};

}  // namespace memwire::detail
