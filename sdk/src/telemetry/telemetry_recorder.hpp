#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/status.hpp"
#include "memwire/telemetry.hpp"

namespace memwire::detail {

enum class Side { Active = 0, Passive = 1 };
enum class Direction { Outbound = 0, Inbound = 1 };

// One connector's counters: fixed arrays of relaxed atomics indexed by transport, kind, side
// and status, so that recording on the data path takes no lock and allocates nothing.
class TelemetryRecorder {
 public:
  // Upper bounds of the duration buckets, in seconds: 10 us (a small same-host read) to 30 s.
  static constexpr std::array<double, 20> kBucketBounds = {
      10e-6, 25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
      25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0,    10.0, 30.0};
  // "none" (no transport picked) and up to kTransports - 1 named ones.
  static constexpr std::size_t kTransports = 8;

  // `transports`: the names it counts, the registry's (known_transports(),
  // transport/registry.cpp); any other name counts as "none".
  explicit TelemetryRecorder(const std::vector<std::string_view>& transports);

  // An operation reached its final status. `code` is the error's code when it errored.
  void operation_ended(std::string_view transport, OperationKind kind, Side side,
                       OperationStatus status, std::optional<ErrorCode> code, std::uint64_t bytes,
                       std::chrono::nanoseconds duration) noexcept;
  void registered(std::uint64_t bytes) noexcept;
  void unregistered(std::uint64_t bytes) noexcept;
  void connection_opened(std::string_view transport, Direction direction) noexcept;
  void connection_closed(std::string_view transport, Direction direction) noexcept;
  // A peer's connection ended in an access fault; a connection refused for its source's faults.
  void peer_fault() noexcept { peer_faults_.fetch_add(1, std::memory_order_relaxed); }
  void memory_region_registered() noexcept {
    memory_regions_.fetch_add(1, std::memory_order_relaxed);
  }
  void connection_refused() noexcept {
    refused_connections_.fetch_add(1, std::memory_order_relaxed);
  }
  // A peer's request for remote keys refused: the connector held as many as it may.
  void grant_refused() noexcept { refused_grants_.fetch_add(1, std::memory_order_relaxed); }
  // Tagged pool transfers peers hold open on this connector (TransferBudget), and those refused
  // for a limit on them.
  void transfers_held(std::uint64_t count) noexcept {
    peer_transfers_open_.fetch_add(count, std::memory_order_relaxed);
  }
  void transfers_released(std::uint64_t count) noexcept {
    peer_transfers_open_.fetch_sub(count, std::memory_order_relaxed);
  }
  void transfer_refused() noexcept { refused_transfers_.fetch_add(1, std::memory_order_relaxed); }

  // `transports`: the ones that started; their connection gauges are listed even at zero.
  TelemetrySnapshot snapshot(const std::string& connector,
                             const std::vector<std::string>& transports) const;

 private:
  static constexpr std::size_t kKinds = 2;  // read, write
  static constexpr std::size_t kSides = 2;
  static constexpr std::size_t kErrorCodes = static_cast<std::size_t>(ErrorCode::Expired) + 1;
  static constexpr std::size_t kStatuses = 2 + kErrorCodes;  // complete, cancelled, error by code
  static constexpr std::size_t kSeries = kTransports * kKinds * kSides;

  struct Counter {
    std::atomic<std::uint64_t> operations{0};
    std::atomic<std::uint64_t> bytes{0};
  };
  struct Histogram {
    std::array<std::atomic<std::uint64_t>, kBucketBounds.size() + 1> buckets{};  // last: +Inf
    std::atomic<std::uint64_t> sum_nanoseconds{0};
  };
  struct Connections {
    std::atomic<std::uint64_t> opened{0};
    std::atomic<std::uint64_t> closed{0};
  };

  std::size_t transport_index(std::string_view transport) const noexcept;

  std::array<std::string_view, kTransports> transport_names_{"none"};

  std::array<Counter, kSeries * kStatuses> counters_{};
  std::array<Histogram, kSeries> durations_{};
  std::array<Connections, kTransports * 2> connections_{};
  std::atomic<std::uint64_t> registered_bytes_{0};
  std::atomic<std::uint64_t> registrations_{0};
  std::atomic<std::uint64_t> peer_faults_{0};
  std::atomic<std::uint64_t> memory_regions_{0};
  std::atomic<std::uint64_t> refused_connections_{0};
  std::atomic<std::uint64_t> refused_grants_{0};
  std::atomic<std::uint64_t> peer_transfers_open_{0};
  std::atomic<std::uint64_t> refused_transfers_{0};
};

}  // namespace memwire::detail
