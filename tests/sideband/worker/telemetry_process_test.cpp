// memwire-producer and memwire-consumer as real processes with --metrics-listen: scraped over
// HTTP while they linger after their work, each shows the transfers it took part in.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <fstream>

#include "support/built_programs.hpp"
#include "support/child_process.hpp"
#include "support/loopback.hpp"
#include "support/prometheus_text.hpp"
#include "support/registry_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using namespace memwire::test_support;

PrometheusText scrape(std::uint16_t port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto response = client.Get("/metrics");
  PrometheusText failed;
  failed.problems.push_back("GET /metrics on port " + std::to_string(port) + " failed");
  if (!response || response->status != 200) return failed;
  return parse_prometheus(response->body);
}

// Reads `process`'s stdout until a line containing `text` (at most `timeout`).
bool wait_for_line(ChildProcess& process, const std::string& text, std::string& seen,
                   std::chrono::milliseconds timeout = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = process.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()));
    if (!line) return false;
    seen += *line + "\n";
    if (line->find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(WorkerMetrics, ProducerAndConsumerServeTheirCountsWhileLingering) {
  constexpr int kRequests = 4, kDim = 2048;
  constexpr double kBytes = kRequests * kDim * sizeof(float);
  RegistryProcess registry;
  const auto producer_port = free_loopback_port(), consumer_port = free_loopback_port();
  // The producer takes its address from the environment, the consumer from the flag.
  ChildProcess producer({memwire::test::producer_program(), "--http", registry.url(), "--requests",
                         std::to_string(kRequests), "--dim", std::to_string(kDim), "--prefix",
                         "metrics", "--linger", "60"},
                        {"MEMWIRE_METRICS_LISTEN=127.0.0.1:" + std::to_string(producer_port)});
  ChildProcess consumer({memwire::test::consumer_program(), "--http", registry.url(), "--requests",
                         std::to_string(kRequests), "--dim", std::to_string(kDim), "--prefix",
                         "metrics", "--linger", "60", "--metrics-listen",
                         "127.0.0.1:" + std::to_string(consumer_port)});
  std::string consumer_out, producer_out;
  ASSERT_TRUE(wait_for_line(consumer, "consumer: lingering", consumer_out)) << consumer_out;
  ASSERT_TRUE(wait_for_line(producer, "producer: lingering", producer_out)) << producer_out;

  auto consumed = scrape(consumer_port);
  EXPECT_TRUE(consumed.problems.empty()) << ::testing::PrintToString(consumed.problems);
  EXPECT_EQ(consumed.sum("memwire_operations_total",
                         {{"kind", "read"}, {"side", "active"}, {"status", "complete"}}),
            kRequests);
  EXPECT_EQ(consumed.sum("memwire_transferred_bytes_total",
                         {{"kind", "read"}, {"side", "active"}, {"status", "complete"}}),
            kBytes);
  EXPECT_EQ(consumed.sum("memwire_operations_total", {}), kRequests);

  auto produced = scrape(producer_port);
  EXPECT_TRUE(produced.problems.empty()) << ::testing::PrintToString(produced.problems);
  EXPECT_EQ(produced.sum("memwire_operations_total",
                         {{"kind", "read"}, {"side", "passive"}, {"status", "complete"}}),
            kRequests);
  EXPECT_EQ(produced.sum("memwire_transferred_bytes_total", {{"side", "passive"}}), kBytes);
  EXPECT_EQ(produced.value("memwire_registrations_total"), kRequests);
  EXPECT_EQ(produced.value("memwire_registered_bytes"), 0);

  httplib::Client health("127.0.0.1", producer_port);
  auto ok = health.Get("/healthz");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);

  // SIGTERM ends the linger: the producer exits 0 at once, the consumer by the signal.
  producer.kill(SIGTERM);
  consumer.kill(SIGTERM);
  EXPECT_EQ(producer.wait(10s), 0);
  EXPECT_EQ(consumer.wait(10s), 128 + SIGTERM);
}

// memwire serve --metrics-listen: after one of its two reads, its scrape shows that read.
TEST(WorkerMetrics, CliServeServesItsCounts) {
  RegistryProcess registry;
  memwire::test_support::TempDir dir;
  const auto in = dir.file("in.bin"), out = dir.file("out.bin");
  constexpr std::size_t kSize = 70000;
  {
    std::ofstream file(in, std::ios::binary);
    for (std::size_t i = 0; i < kSize; ++i) file.put(static_cast<char>(i * 13));
  }
  const auto port = free_loopback_port();
  ChildProcess server({memwire::test::cli_program(), "serve", "metrics.file", in, "--http",
                       registry.url(), "--count", "2", "--metrics-listen",
                       "127.0.0.1:" + std::to_string(port)});
  std::string seen;
  ASSERT_TRUE(wait_for_line(server, "published metrics.file", seen)) << seen;
  auto get = [&] {
    ChildProcess cli(
        {memwire::test::cli_program(), "get", "metrics.file", out, "--http", registry.url()});
    return cli.wait(30s).value_or(-1);
  };
  ASSERT_EQ(get(), 0);
  ASSERT_TRUE(wait_for_line(server, "read metrics.file", seen)) << seen;
  auto served = scrape(port);
  EXPECT_TRUE(served.problems.empty()) << ::testing::PrintToString(served.problems);
  EXPECT_EQ(served.sum("memwire_operations_total",
                       {{"kind", "read"}, {"side", "passive"}, {"status", "complete"}}),
            1);
  EXPECT_EQ(served.sum("memwire_transferred_bytes_total", {{"status", "complete"}}), kSize);
  // Republished after the read is reported: one registration, or two once it is.
  EXPECT_GE(served.value("memwire_registrations_total"), 1);
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(server.wait(20s), 0);
}

TEST(WorkerMetrics, AMalformedListenAddressIsAUsageError) {
  RegistryProcess registry;
  ChildProcess consumer({memwire::test::consumer_program(), "--http", registry.url(),
                         "--metrics-listen", "127.0.0.1:notaport"});
  EXPECT_EQ(consumer.wait(10s), 2);
  ChildProcess producer(
      {memwire::test::producer_program(), "--http", registry.url(), "--linger", "-1"});
  EXPECT_EQ(producer.wait(10s), 2);
}

}  // namespace
