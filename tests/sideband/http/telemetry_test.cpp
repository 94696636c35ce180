// Data-plane telemetry and logs with real transfers: counters scraped over real HTTP (the
// MetricsListener and an HttpEndpoint's /metrics) must show exactly the operations and bytes a
// test caused, in valid Prometheus text; log lines are JSON with the documented fields.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "memwire/memwire.hpp"
#include "memwire/sideband/http.hpp"
#include "memwire/sideband/metrics_listener.hpp"
#include "support/error_code_of.hpp"
#include "support/loopback.hpp"
#include "support/prometheus_text.hpp"
#include "support/tcp_only.hpp"

namespace {

using namespace std::chrono_literals;
using namespace memwire;
using memwire::test_support::error_code_of;
using memwire::test_support::parse_prometheus;
using memwire::test_support::PrometheusText;
using memwire::test_support::series;
using memwire::test_support::transport_only;

PrometheusText scrape(std::uint16_t port, const std::string& path = "/metrics") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto response = client.Get(path.c_str());
  if (!response || response->status != 200) {
    PrometheusText failed;
    failed.problems.push_back("GET " + path + " failed");
    return failed;
  }
  EXPECT_NE(response->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  return parse_prometheus(response->body);
}

std::map<std::string, std::string> labels(const std::string& transport, const std::string& kind,
                                          const std::string& side, const std::string& status,
                                          const std::string& code = "") {
  std::map<std::string, std::string> result{
      {"transport", transport}, {"kind", kind}, {"side", side}, {"status", status}};
  if (!code.empty()) result["code"] = code;
  return result;
}

// `text` counts `operations` operations of `bytes` bytes in all under the labels `where`.
void expect_counted(const PrometheusText& text, const std::map<std::string, std::string>& where,
                    double operations, double bytes) {
  EXPECT_EQ(text.value(series("memwire_operations_total", where)), operations)
      << ::testing::PrintToString(where);
  EXPECT_EQ(text.value(series("memwire_transferred_bytes_total", where)), bytes)
      << ::testing::PrintToString(where);
}

// Every line a connector logs, kept for the test; waits for a line that is yet to come.
class LogLines {
 public:
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
      added_.notify_all();
    };
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  // The first line whose "event" is `event` and that has every field of `fields`.
  std::optional<nlohmann::json> wait_for(const std::string& event,
                                         const std::map<std::string, std::string>& fields,
                                         std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mutex_);
    std::optional<nlohmann::json> found;
    added_.wait_for(lock, timeout, [&] {
      for (const auto& line : lines_) {
        auto json = nlohmann::json::parse(line, nullptr, false);
        if (!json.is_object() || json.value("event", "") != event) continue;
        bool all = true;
        for (const auto& [name, value] : fields)
          if (json.value(name, "") != value) all = false;
        if (all) {
          found = json;
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  std::mutex mutex_;
  std::condition_variable added_;
  std::vector<std::string> lines_;
};

class TelemetryScrape : public ::testing::TestWithParam<std::string> {};

// N reads and M writes of known sizes, one refused read (a forged token), one cancelled
// passive operation and (tcp) one cancelled read of a peer that never answers: the scrape of
// each side finds exactly these counts and bytes.
TEST_P(TelemetryScrape, FindsExactlyTheCountsAndBytesOfRealTransfers) {
  const std::string transport = GetParam();
  constexpr int kReads = 5, kWrites = 3;
  constexpr std::size_t kReadSize = 4096, kWriteSize = 10000;
  LogLines reader_log;
  auto reader_options = transport_only(transport);
  reader_options.log = reader_log.sink();
  reader_options.log_level = LogLevel::Debug;
  Connector owner(transport_only(transport)), reader(reader_options);

  // The reader serves its telemetry on a metrics listener, the owner on its HTTP endpoint.
  sideband::MetricsListenerOptions listener_options;
  listener_options.metrics = [&reader] { return to_prometheus(reader.telemetry()); };
  sideband::MetricsListener listener(listener_options);
  sideband::HttpEndpointOptions endpoint_options;
  endpoint_options.metrics = [&owner] { return to_prometheus(owner.telemetry()); };
  sideband::HttpEndpoint endpoint(endpoint_options);
  endpoint.start();

  for (int i = 0; i < kReads; ++i) {
    std::vector<std::byte> source(kReadSize, std::byte(i)), target(kReadSize);
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    ASSERT_EQ(read.wait_for_completion(30s), OperationStatus::Complete);
    ASSERT_EQ(readable.wait_for_completion(30s), OperationStatus::Complete);
    ASSERT_EQ(read.transport(), transport);
    ASSERT_EQ(target, source);
  }
  for (int i = 0; i < kWrites; ++i) {
    std::vector<std::byte> source(kWriteSize, std::byte(i)), target(kWriteSize);
    auto writable = owner.create_writable({Descriptor(std::span(target))});
    auto write = reader.begin_write({Descriptor(std::span(source))}, writable.metadata());
    ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
    ASSERT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
    ASSERT_EQ(target, source);
  }
  // Refused: the right key with a forged token; the owner then cancels its readable.
  std::vector<std::byte> guarded(kReadSize), landing(kReadSize);
  auto readable = owner.create_readable({Descriptor(std::span(guarded))});
  const auto real = readable.metadata();
  auto fields = real.fields();
  fields.token.back() = fields.token.back() == '0' ? '1' : '0';
  RdmaMetadata forged(std::move(fields));
  {
    auto refused = reader.begin_read(forged, {Descriptor(std::span(landing))});
    ASSERT_EQ(error_code_of([&] { refused.wait_for_completion(30s); }), ErrorCode::AccessDenied)
        << "a read with a forged token";
  }
  readable.cancel();
  // Cancelled while a peer that accepted the connection never answers (tcp only: shm needs a
  // process that answers its probe).
  memwire::test_support::SilentListener silent;
  const bool with_silent_peer = transport == "tcp";
  if (with_silent_peer) {
    auto address = silent.url().substr(std::string("http://").size());
    RdmaMetadata hung(
        {.kind = OperationKind::Read,
         .descriptors = {{Device{}, reinterpret_cast<std::uintptr_t>(guarded.data()), kReadSize}},
         .notification_key = real.notification_key(),
         .endpoint = {"silent", "host", {{"tcp", address, {}, {}}}},
         .token = real.token(),
         .expires_at_ms = 0});
    auto stalled = reader.begin_read(hung, {Descriptor(std::span(landing))});
    stalled.cancel();
    EXPECT_THROW(stalled.wait_for_completion(30s), Error);
    EXPECT_EQ(stalled.status(), OperationStatus::Cancelled);
  }

  auto active = scrape(listener.port());
  EXPECT_TRUE(active.problems.empty()) << ::testing::PrintToString(active.problems);
  const auto& t = transport;
  expect_counted(active, labels(t, "read", "active", "complete"), kReads, kReads * kReadSize);
  expect_counted(active, labels(t, "write", "active", "complete"), kWrites, kWrites * kWriteSize);
  expect_counted(active, labels(t, "read", "active", "error", "access_denied"), 1, kReadSize);
  const int cancelled = with_silent_peer ? 1 : 0;
  EXPECT_EQ(active.sum("memwire_operations_total", {{"status", "cancelled"}}), cancelled);
  // Nothing else: every operation the reader began is one of the above.
  EXPECT_EQ(active.sum("memwire_operations_total", {}), kReads + kWrites + 1 + cancelled);
  EXPECT_EQ(active.sum("memwire_operation_duration_seconds_count", {}),
            kReads + kWrites + 1 + cancelled);
  EXPECT_EQ(active.value(series("memwire_operation_duration_seconds_count",
                                {{"transport", t}, {"kind", "write"}, {"side", "active"}})),
            kWrites);
  EXPECT_EQ(active.value("memwire_registered_bytes"), 0);
  EXPECT_EQ(active.value("memwire_registrations_total"), 0);
  EXPECT_GE(active.value(series("memwire_connections_opened_total",
                                {{"transport", t}, {"direction", "outbound"}})),
            1);

  auto passive = scrape(endpoint.port());
  EXPECT_TRUE(passive.problems.empty()) << ::testing::PrintToString(passive.problems);
  EXPECT_EQ(
      passive.value(series("memwire_operations_total", labels(t, "read", "passive", "complete"))),
      kReads);
  EXPECT_EQ(passive.value(series("memwire_transferred_bytes_total",
                                 labels(t, "write", "passive", "complete"))),
            kWrites * kWriteSize);
  // The forged read never got in, so no transport ever served the cancelled readable.
  EXPECT_EQ(passive.value(
                series("memwire_operations_total", labels("none", "read", "passive", "cancelled"))),
            1);
  EXPECT_EQ(passive.sum("memwire_operations_total", {}), kReads + kWrites + 1);
  EXPECT_EQ(passive.value("memwire_registrations_total"), kReads + kWrites + 1);
  EXPECT_EQ(passive.value("memwire_registered_bytes"), 0);
  EXPECT_GE(
      passive.value(series("memwire_connections", {{"transport", t}, {"direction", "inbound"}})),
      1);
  // The endpoint's own gauges are still there.
  EXPECT_EQ(passive.value("memwire_names"), 0);

  // The refusal was logged once, as JSON with the fields an operator needs.
  auto failed = reader_log.wait_for("operation_failed", {{"code", "access_denied"}});
  ASSERT_TRUE(failed) << ::testing::PrintToString(reader_log.lines());
  EXPECT_EQ(failed->value("level", ""), "warn");
  EXPECT_EQ(failed->value("connector", ""), reader.name());
  EXPECT_EQ(failed->value("peer", ""), owner.name());
  EXPECT_EQ(failed->value("transport", ""), t);
  EXPECT_EQ(failed->value("key", ""), real.notification_key());
  EXPECT_EQ(failed->value("kind", ""), "read");
  EXPECT_EQ(failed->value("side", ""), "active");
  EXPECT_TRUE(reader_log.wait_for("transport_chosen", {{"transport", t}, {"peer", owner.name()}}));
  EXPECT_TRUE(reader_log.wait_for("connection_opened", {{"transport", t}}));
  for (const auto& line : reader_log.lines()) {
    auto json = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(json.is_object()) << line;
    for (const char* field : {"ts", "level", "event", "msg", "connector"})
      EXPECT_TRUE(json.contains(field) && json[field].is_string()) << field << " in " << line;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TelemetryScrape, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

// Many threads read at once while others snapshot: the totals are exact (and TSan sees no race).
TEST(Telemetry, CountsExactlyUnderConcurrency) {
  constexpr int kThreads = 8, kPerThread = 25;
  constexpr std::size_t kSize = 4096;
  Connector owner(transport_only("tcp")), reader(transport_only("tcp"));
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done) {
      for (const auto* connector : {&reader, &owner}) {
        auto problems = parse_prometheus(to_prometheus(connector->telemetry())).problems;
        ASSERT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
      }
    }
  });
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      std::vector<std::byte> source(kSize, std::byte{7}), target(kSize);
      for (int i = 0; i < kPerThread; ++i) {
        try {
          auto readable = owner.create_readable({Descriptor(std::span(source))});
          auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
          read.wait_for_completion(30s);
          readable.wait_for_completion(30s);
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  for (auto& thread : threads) thread.join();
  done = true;
  scraper.join();
  ASSERT_EQ(failures, 0);
  constexpr std::uint64_t kTotal = kThreads * kPerThread;
  auto count = [](const TelemetrySnapshot& snapshot, const std::string& side) {
    std::uint64_t operations = 0, bytes = 0;
    for (const auto& entry : snapshot.operations)
      if (entry.side == side && entry.status == "complete" && entry.transport == "tcp") {
        operations += entry.operations;
        bytes += entry.bytes;
      }
    return std::pair(operations, bytes);
  };
  EXPECT_EQ(count(reader.telemetry(), "active"), std::pair(kTotal, kTotal * kSize));
  EXPECT_EQ(count(owner.telemetry(), "passive"), std::pair(kTotal, kTotal * kSize));
  EXPECT_EQ(owner.telemetry().registrations, kTotal);
  EXPECT_EQ(owner.telemetry().registered_bytes, 0u);
}

// Telemetry off: nothing is counted, and the text is still valid.
TEST(Telemetry, OffCountsNothing) {
  auto options = transport_only("tcp");
  options.telemetry = false;
  Connector owner(transport_only("tcp")), reader(options);
  std::vector<std::byte> source(4096), target(4096);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  reader.begin_read(readable.metadata(), {Descriptor(std::span(target))}).wait_for_completion(30s);
  auto snapshot = reader.telemetry();
  EXPECT_TRUE(snapshot.operations.empty());
  EXPECT_EQ(snapshot.connector, reader.name());
  EXPECT_TRUE(parse_prometheus(to_prometheus(snapshot)).problems.empty());
}

// Label values are escaped; the reader rejects what Prometheus would.
TEST(Telemetry, PrometheusTextEscapesAndTheReaderIsStrict) {
  TelemetrySnapshot snapshot;
  snapshot.operations.push_back({"tcp", "read", "active", "error", "we\"ird\\co\nde", 1, 2});
  auto parsed = parse_prometheus(to_prometheus(snapshot));
  EXPECT_TRUE(parsed.problems.empty()) << ::testing::PrintToString(parsed.problems);
  EXPECT_EQ(parsed.sum("memwire_operations_total", {}), 1);
  // The reader must be able to fail.
  EXPECT_FALSE(parse_prometheus("memwire_x_total 1\n").problems.empty());  // no TYPE
  EXPECT_FALSE(parse_prometheus("# TYPE memwire_x_total counter\nmemwire_x_total{a=\"b} 1\n")
                   .problems.empty());
  EXPECT_FALSE(parse_prometheus("# TYPE memwire_x counter\nmemwire_x 1\n").problems.empty());
}

// Below the level, nothing; MEMWIRE_LOG_LEVEL sets it and is checked.
TEST(Telemetry, LogLevelFiltersAndComesFromTheEnvironment) {
  LogLines warn_only;
  auto options = transport_only("tcp");
  options.transports = {"verbs-does-not-exist", "tcp"};
  options.log = warn_only.sink();
  options.log_level = LogLevel::Warn;
  Connector quiet(options);
  Connector owner(transport_only("tcp"));
  std::vector<std::byte> source(4096), target(4096);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  quiet.begin_read(readable.metadata(), {Descriptor(std::span(target))}).wait_for_completion(30s);
  for (const auto& line : warn_only.lines()) {
    auto level = nlohmann::json::parse(line).value("level", "");
    EXPECT_TRUE(level == "warn" || level == "error") << line;
  }
  LogLines info;
  options.log = info.sink();
  options.log_level = LogLevel::Info;
  Connector chatty(options);
  EXPECT_TRUE(info.wait_for(
      "transport_skipped",
      {{"transport", "verbs-does-not-exist"}, {"level", "info"}, {"code", "invalid_argument"}}));

  ::setenv("MEMWIRE_LOG_LEVEL", "debug", 1);
  auto from_environment = ConnectorOptions::from_environment();
  EXPECT_EQ(from_environment.log_level, LogLevel::Debug);
  EXPECT_TRUE(static_cast<bool>(from_environment.log));
  ::setenv("MEMWIRE_LOG_LEVEL", "loud", 1);
  try {
    ConnectorOptions::from_environment();
    ADD_FAILURE() << "MEMWIRE_LOG_LEVEL=loud was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
  }
  ::unsetenv("MEMWIRE_LOG_LEVEL");
}

// The metrics listener serves /metrics and /healthz only.
TEST(MetricsListener, ServesMetricsAndHealthOnly) {
  sideband::MetricsListenerOptions options;
  options.metrics = [] { return std::string("# TYPE memwire_probe gauge\nmemwire_probe 7\n"); };
  sideband::MetricsListener listener(options);
  httplib::Client client("127.0.0.1", listener.port());
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(scrape(listener.port()).value("memwire_probe"), 7);
  for (const char* path : {"/v1/metadata", "/v1/metadata/x", "/v1/servers"}) {
    auto response = client.Get(path);
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 404) << path;
  }
  auto put = client.Put("/v1/metadata/x", "{}", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 404);
}

}  // namespace
