#include "telemetry/connection_watch.hpp"

#include <utility>

namespace memwire::detail {
namespace {

std::string_view direction_name(Direction direction) {
  return direction == Direction::Outbound ? "outbound" : "inbound";
}

}  // namespace

ConnectionWatch::ConnectionWatch(std::shared_ptr<TelemetryRecorder> telemetry,
                                 std::shared_ptr<const EventLog> events, std::string transport,
                                 Direction direction, std::string peer)
    : telemetry_(std::move(telemetry)),
      events_(std::move(events)),
      transport_(std::move(transport)),
      direction_(direction),
      peer_(std::move(peer)) {
  if (telemetry_) telemetry_->connection_opened(transport_, direction_);
  if (events_)
    events_->write(LogLevel::Debug, "connection_opened",
                   std::string(direction_name(direction_)) + " connection opened",
                   LogFields().peer(peer_).transport(transport_));
}

ConnectionWatch::~ConnectionWatch() { closed("connection closed", LogLevel::Debug); }

void ConnectionWatch::closed(std::string_view reason, LogLevel level) {
  const bool lost = level >= LogLevel::Warn;
  if (closed_.exchange(true)) return;
  if (telemetry_) telemetry_->connection_closed(transport_, direction_);
  if (events_)
    events_->write(level, lost ? "connection_lost" : "connection_closed",
                   std::string(direction_name(direction_)) +
                       (lost ? " connection lost" : " connection closed"),
                   LogFields().peer(peer_).transport(transport_).reason(reason));
}

}  // namespace memwire::detail
