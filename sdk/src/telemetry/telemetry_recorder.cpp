#include "telemetry/telemetry_recorder.hpp"

#include <algorithm>

#include "memwire/error_codes.hpp"

namespace memwire::detail {
namespace {

constexpr std::array<std::string_view, 2> kKindNames = {"read", "write"};
constexpr std::array<std::string_view, 2> kSideNames = {"active", "passive"};
constexpr std::array<std::string_view, 2> kDirectionNames = {"outbound", "inbound"};

constexpr std::uint64_t nanoseconds_of(double seconds) {
  return static_cast<std::uint64_t>(seconds * 1e9 + 0.5);
}

constexpr auto kBucketNanoseconds = [] {
  std::array<std::uint64_t, TelemetryRecorder::kBucketBounds.size()> bounds{};
  for (std::size_t i = 0; i < bounds.size(); ++i)
    bounds[i] = nanoseconds_of(TelemetryRecorder::kBucketBounds[i]);
  return bounds;
}();

}  // namespace

TelemetryRecorder::TelemetryRecorder(const std::vector<std::string_view>& transports) {
  if (transports.size() >= kTransports)
    throw Error(ErrorCode::InvalidArgument,
                "telemetry counts at most " + std::to_string(kTransports - 1) + " transports");
  std::copy(transports.begin(), transports.end(), transport_names_.begin() + 1);
}

std::size_t TelemetryRecorder::transport_index(std::string_view transport) const noexcept {
  for (std::size_t i = 1; i < transport_names_.size(); ++i)
    if (!transport_names_[i].empty() && transport_names_[i] == transport) return i;
  return 0;
}

void TelemetryRecorder::operation_ended(std::string_view transport, OperationKind kind, Side side,
                                        OperationStatus status, std::optional<ErrorCode> code,
                                        std::uint64_t bytes,
                                        std::chrono::nanoseconds duration) noexcept {
  if (kind != OperationKind::Read && kind != OperationKind::Write) return;
  const std::size_t series =
      (transport_index(transport) * kKinds + (kind == OperationKind::Read ? 0 : 1)) * kSides +
      static_cast<std::size_t>(side);
  std::size_t status_index = 0;  // complete
  if (status == OperationStatus::Cancelled) {
    status_index = 1;
  } else if (status == OperationStatus::Errored) {
    status_index = 2 + static_cast<std::size_t>(code.value_or(ErrorCode::Transport));
    if (status_index >= kStatuses) return;
  } else if (status != OperationStatus::Complete) {
    return;
  }
  auto& counter = counters_[series * kStatuses + status_index];
  counter.operations.fetch_add(1, std::memory_order_relaxed);
  counter.bytes.fetch_add(bytes, std::memory_order_relaxed);

  const auto nanoseconds = static_cast<std::uint64_t>(std::max<std::int64_t>(duration.count(), 0));
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(kBucketNanoseconds.begin(), kBucketNanoseconds.end(), nanoseconds) -
      kBucketNanoseconds.begin());
  auto& histogram = durations_[series];
  histogram.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  histogram.sum_nanoseconds.fetch_add(nanoseconds, std::memory_order_relaxed);
}

void TelemetryRecorder::registered(std::uint64_t bytes) noexcept {
  registrations_.fetch_add(1, std::memory_order_relaxed);
  registered_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void TelemetryRecorder::unregistered(std::uint64_t bytes) noexcept {
  registered_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

void TelemetryRecorder::connection_opened(std::string_view transport,
                                          Direction direction) noexcept {
  connections_[transport_index(transport) * 2 + static_cast<std::size_t>(direction)]
      .opened.fetch_add(1, std::memory_order_relaxed);
}

void TelemetryRecorder::connection_closed(std::string_view transport,
                                          Direction direction) noexcept {
  connections_[transport_index(transport) * 2 + static_cast<std::size_t>(direction)]
      .closed.fetch_add(1, std::memory_order_relaxed);
}

TelemetrySnapshot TelemetryRecorder::snapshot(const std::string& connector,
                                              const std::vector<std::string>& transports) const {
  TelemetrySnapshot snapshot;
  snapshot.connector = connector;
  for (std::size_t transport = 0; transport < kTransports; ++transport) {
    if (transport_names_[transport].empty()) continue;
    for (std::size_t kind = 0; kind < kKinds; ++kind)
      for (std::size_t side = 0; side < kSides; ++side) {
        const std::size_t series = (transport * kKinds + kind) * kSides + side;
        for (std::size_t status = 0; status < kStatuses; ++status) {
          const auto& counter = counters_[series * kStatuses + status];
          const auto operations = counter.operations.load(std::memory_order_relaxed);
          if (operations == 0) continue;
          OperationCount count;
          count.transport = transport_names_[transport];
          count.kind = kKindNames[kind];
          count.side = kSideNames[side];
          count.status = status == 0 ? "complete" : status == 1 ? "cancelled" : "error";
          if (status >= 2)
            count.code = std::string(error_code_name(static_cast<ErrorCode>(status - 2)));
          count.operations = operations;
          count.bytes = counter.bytes.load(std::memory_order_relaxed);
          snapshot.operations.push_back(std::move(count));
        }
        const auto& histogram = durations_[series];
        DurationHistogram durations;
        std::uint64_t running = 0;
        for (std::size_t bucket = 0; bucket < kBucketBounds.size(); ++bucket) {
          running += histogram.buckets[bucket].load(std::memory_order_relaxed);
          durations.cumulative.push_back(running);
        }
        running += histogram.buckets.back().load(std::memory_order_relaxed);
        if (running == 0) continue;
        durations.transport = transport_names_[transport];
        durations.kind = kKindNames[kind];
        durations.side = kSideNames[side];
        durations.upper_bounds_seconds.assign(kBucketBounds.begin(), kBucketBounds.end());
        durations.count = running;
        durations.sum_seconds =
            static_cast<double>(histogram.sum_nanoseconds.load(std::memory_order_relaxed)) / 1e9;
        snapshot.durations.push_back(std::move(durations));
      }
  }
  for (std::size_t transport = 0; transport < kTransports; ++transport) {
    if (transport_names_[transport].empty()) continue;
    const bool started = std::find(transports.begin(), transports.end(),
                                   transport_names_[transport]) != transports.end();
    for (std::size_t direction = 0; direction < 2; ++direction) {
      const auto& connections = connections_[transport * 2 + direction];
      // Closed first: a connection that opens and closes in between never shows as -1 open.
      const auto closed = connections.closed.load(std::memory_order_relaxed);
      const auto opened = connections.opened.load(std::memory_order_relaxed);
      if (!started && opened == 0) continue;
      snapshot.connections.push_back({std::string(transport_names_[transport]),
                                      std::string(kDirectionNames[direction]),
                                      opened >= closed ? opened - closed : 0, opened});
    }
  }
  snapshot.registered_bytes = registered_bytes_.load(std::memory_order_relaxed);
  snapshot.registrations = registrations_.load(std::memory_order_relaxed);
  snapshot.peer_faults = peer_faults_.load(std::memory_order_relaxed);
  snapshot.memory_regions = memory_regions_.load(std::memory_order_relaxed);
  snapshot.refused_connections = refused_connections_.load(std::memory_order_relaxed);
  snapshot.refused_grants = refused_grants_.load(std::memory_order_relaxed);
  snapshot.peer_transfers_open = peer_transfers_open_.load(std::memory_order_relaxed);
  snapshot.refused_transfers = refused_transfers_.load(std::memory_order_relaxed);
  return snapshot;
}

}  // namespace memwire::detail
