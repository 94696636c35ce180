// Prometheus text exposition of a TelemetrySnapshot.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "memwire/telemetry.hpp"

namespace memwire {
namespace {

// The shortest text that reads back as exactly `value`.
std::string number(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc{} ? std::string(buffer, end) : std::string("NaN");
}

// Label values escape backslash, double quote and newline.
void append_label(std::string& out, std::string_view name, std::string_view value) {
  if (out.back() != '{') out += ',';
  out.append(name).append("=\"");
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

struct Sample {
  std::string text;
  explicit Sample(std::string_view name) : text(name) { text += '{'; }
  Sample& label(std::string_view name, std::string_view value) {
    append_label(text, name, value);
    return *this;
  }
  void value(std::string& out, std::string_view number) {
    if (text.back() == '{')
      text.pop_back();  // no labels
    else
      text += '}';
    out.append(text).append(" ").append(number).append("\n");
  }
};

Sample operation_sample(std::string_view name, const OperationCount& count) {
  Sample sample(name);
  sample.label("transport", count.transport)
      .label("kind", count.kind)
      .label("side", count.side)
      .label("status", count.status);
  if (!count.code.empty()) sample.label("code", count.code);
  return sample;
}

}  // namespace

std::string to_prometheus(const TelemetrySnapshot& snapshot) {
  std::string out;
  family(out, "memwire_operations_total", "counter",
         "Data-plane operations that ended, by transport, kind, side and final status.");
  for (const auto& count : snapshot.operations)
    operation_sample("memwire_operations_total", count)
        .value(out, std::to_string(count.operations));
  family(out, "memwire_transferred_bytes_total", "counter",
         "Bytes of the operations that ended (an errored or cancelled one counts its full size).");
  for (const auto& count : snapshot.operations)
    operation_sample("memwire_transferred_bytes_total", count)
        .value(out, std::to_string(count.bytes));

  family(out, "memwire_operation_duration_seconds", "histogram",
         "Time from an operation's creation to its final status.");
  for (const auto& histogram : snapshot.durations) {
    auto labelled = [&](std::string_view suffix) {
      Sample sample(std::string("memwire_operation_duration_seconds") + std::string(suffix));
      sample.label("transport", histogram.transport)
          .label("kind", histogram.kind)
          .label("side", histogram.side);
      return sample;
    };
    for (std::size_t i = 0; i < histogram.upper_bounds_seconds.size(); ++i)
      labelled("_bucket")
          .label("le", number(histogram.upper_bounds_seconds[i]))
          .value(out, std::to_string(histogram.cumulative[i]));
    labelled("_bucket").label("le", "+Inf").value(out, std::to_string(histogram.count));
    labelled("_sum").value(out, number(histogram.sum_seconds));
    labelled("_count").value(out, std::to_string(histogram.count));
  }

  // The series without labels: one sample each.
  const struct {
    std::string_view name, type, help;
    std::uint64_t value;
  } unlabelled[] = {
      {"memwire_registered_bytes", "gauge",
       "Local memory that remote peers may read or write right now.", snapshot.registered_bytes},
      {"memwire_registrations_total", "counter", "Readable and writable operations created.",
       snapshot.registrations},
      {"memwire_memory_regions_total", "counter",
       "Device memory registrations (RDMA memory regions) made.", snapshot.memory_regions},
      {"memwire_peer_faults_total", "counter",
       "Accepted connections that ended in a remote access error, a flush or garbage.",
       snapshot.peer_faults},
      {"memwire_refused_connections_total", "counter",
       "Connections refused because their source had too many faults.",
       snapshot.refused_connections},
      {"memwire_refused_grants_total", "counter",
       "Requests for remote keys refused: the connector held its limit of them.",
       snapshot.refused_grants},
      {"memwire_peer_transfers_open", "gauge",
       "Tagged pool transfers peers hold open on this connector over tcp and shm.",
       snapshot.peer_transfers_open},
      {"memwire_refused_transfers_total", "counter",
       "Tagged pool transfers refused: their peer, user or connection held its limit of them.",
       snapshot.refused_transfers},
  };
  for (const auto& series : unlabelled) {
    family(out, series.name, series.type, series.help);
    Sample(series.name).value(out, std::to_string(series.value));
  }

  // Connections by transport and direction: open now, and opened since the connector started.
  const struct {
    std::string_view name, type, help;
    std::uint64_t ConnectionCount::*value;
  } by_connection[] = {
      {"memwire_connections", "gauge", "Data-plane connections open now.", &ConnectionCount::open},
      {"memwire_connections_opened_total", "counter", "Data-plane connections opened.",
       &ConnectionCount::opened},
  };
  for (const auto& series : by_connection) {
    family(out, series.name, series.type, series.help);
    for (const auto& connections : snapshot.connections)
      Sample(series.name)
          .label("transport", connections.transport)
          .label("direction", connections.direction)
          .value(out, std::to_string(connections.*series.value));
  }
  return out;
}

}  // namespace memwire
