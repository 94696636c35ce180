// Separate processes over HTTP: the memwire-registry service, the memwire CLI and the example
// graph workers, spawned as real programs.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "memwire/error.hpp"
#include "memwire/sideband/http.hpp"
#include "support/built_programs.hpp"
#include "support/child_process.hpp"
#include "support/loopback.hpp"
#include "support/metadata_samples.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using test_support::ChildProcess;
using test_support::sample_metadata;

// The registry prints its URL on stdout once it listens.
class RegistryProcess {
 public:
  explicit RegistryProcess(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{memwire::test::registry_program(), "--quiet-requests"};
    // A free port unless the test names one (the default 8470 may be taken).
    if (std::find(extra.begin(), extra.end(), "--listen") == extra.end()) {
      argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = std::make_unique<ChildProcess>(argv);
    auto line = process_->read_line(10s);
    if (!line || !line->starts_with("http")) throw std::runtime_error("registry did not start");
    url_ = *line;
  }
  const std::string& url() const { return url_; }
  std::string port() const { return url_.substr(url_.rfind(':') + 1); }
  int stop() {
    process_->kill(SIGTERM);
    return process_->wait(10s).value_or(-1);
  }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string url_;
};

// Runs a program to its end; returns its exit status.
int run(std::vector<std::string> argv, std::chrono::milliseconds limit = 30s) {
  ChildProcess process(argv);
  return process.wait(limit).value_or(-1);
}

void write_bytes(const std::string& path, std::size_t size, unsigned seed) {
  std::ofstream out(path, std::ios::binary);
  for (std::size_t i = 0; i < size; ++i) out.put(static_cast<char>((i * 131 + seed) & 0xff));
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(HttpProcesses, CliServeAndGetBetweenProcesses) {
  RegistryProcess registry;
  test_support::TempDir dir;
  auto in = dir.file("in.bin");
  write_bytes(in, 3 << 20, 7);
  ChildProcess server({memwire::test::cli_program(), "serve", "blob.one", in, "--count", "2",
                       "--http", registry.url()});
  auto published = server.read_line(10s);
  ASSERT_TRUE(published && published->starts_with("published blob.one")) << published.value_or("");
  for (const char* out : {"out1.bin", "out2.bin"}) {
    EXPECT_EQ(run({memwire::test::cli_program(), "get", "blob.one", dir.file(out), "--http",
                   registry.url(), "--timeout", "10"}),
              0);
    EXPECT_TRUE(read_all(dir.file(out)) == read_all(in)) << out;  // no dump of 3 MiB on failure
  }
  auto served = server.wait(10s);
  std::string said;
  while (auto line = server.read_line(100ms)) said += *line + "\n";
  EXPECT_EQ(served, 0) << said;
  // Served twice, then withdrawn.
  EXPECT_EQ(run({memwire::test::cli_program(), "get", "blob.one", dir.file("out3.bin"), "--http",
                 registry.url()}),
            3);
}

TEST(HttpProcesses, CliExitCodes) {
  RegistryProcess registry({"--token", "s3cret"});
  test_support::TempDir dir;
  auto out = dir.file("out.bin");
  const std::string cli = memwire::test::cli_program();
  EXPECT_EQ(run({cli}), 2);
  EXPECT_EQ(run({cli, "frobnicate"}), 2);
  EXPECT_EQ(run({cli, "get", "x"}), 2);
  EXPECT_EQ(run({cli, "get", "x", out}), 2);  // no --http / --nats
  EXPECT_EQ(run({cli, "get", "x", out, "--http", registry.url(), "--timeout", "soon"}), 2);
  EXPECT_EQ(run({cli, "ls", "--http", registry.url(), "--token", "s3cret"}), 0);
  EXPECT_EQ(run({cli, "get", "missing", out, "--http", registry.url(), "--token", "s3cret"}), 3);
  EXPECT_EQ(run({cli, "get", "missing", out, "--wait", "--timeout", "0.3", "--http", registry.url(),
                 "--token", "s3cret"}),
            4);
  EXPECT_EQ(run({cli, "ls", "--http", registry.url(), "--token", "wrong"}), 1);
  test_support::SilentListener silent;
  EXPECT_EQ(run({cli, "get", "x", out, "--http", silent.url(), "--timeout", "0.3"}), 4);
  auto nowhere = "http://127.0.0.1:" + std::to_string(test_support::free_loopback_port());
  EXPECT_EQ(run({cli, "ls", "--http", nowhere}), 1);
  EXPECT_EQ(run({cli, "serve", "x", dir.file("no-such-file"), "--http", registry.url(), "--token",
                 "s3cret"}),
            1);
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The graph workers over a fresh registry, in their modes, for five names of 4096 floats (the
// consumer first when `consumer_first`): both exit 0, the consumer's last line says `said`.
void expect_graph_workers(const char* producer_mode, const char* consumer_mode, bool consumer_first,
                          const std::string& said) {
  RegistryProcess registry;
  auto stage = [&](const char* program, const char* mode) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        program, "--http", registry.url(), "--mode", mode, "--requests", "5", "--dim", "4096"});
  };
  std::unique_ptr<ChildProcess> producer, consumer;
  if (consumer_first) consumer = stage(memwire::test::consumer_program(), consumer_mode);
  producer = stage(memwire::test::producer_program(), producer_mode);
  if (!consumer) consumer = stage(memwire::test::consumer_program(), consumer_mode);
  std::string last;
  while (auto line = consumer->read_line(30s)) last = *line;
  EXPECT_EQ(consumer->wait(30s), 0);
  EXPECT_EQ(producer->wait(30s), 0);
  EXPECT_NE(last.find(said), std::string::npos) << last;
}

TEST(HttpProcesses, GraphWorkersConsumerReadsProducersReadable) {
  expect_graph_workers("readable", "read", false, "5/5 embeddings verified");
}

// The consumer may ask before the producer serves: it retries "not found" until then.
TEST(HttpProcesses, GraphWorkersProducerWritesIntoConsumersWritable) {
  expect_graph_workers("writable", "request", true,
                       "producer wrote into consumer's writable memory");
}

TEST(HttpProcesses, RegistryRestartedKeepsNamesAndServers) {
  test_support::TempDir dir;
  auto state = dir.file("state.json");
  auto registry = std::make_unique<RegistryProcess>(std::vector<std::string>{"--state", state});
  auto port = registry->port();
  HttpChannelOptions options;
  options.url = registry->url();
  HttpChannel channel(options);
  channel.publish("kept", sample_metadata(1), 0ms);
  channel.publish("expiring", sample_metadata(2), 60000ms);
  auto subscription = channel.serve("svc", [](const std::string&, const RdmaMetadata&) {});
  channel.request("svc.a", sample_metadata(3, OperationKind::Write), 5s);

  EXPECT_EQ(registry->stop(), 0);  // SIGTERM: graceful
  registry.reset();
  try {
    channel.fetch("kept", 1s);
    ADD_FAILURE() << "fetched from a stopped registry";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Transport) << e.what();
  }

  registry = std::make_unique<RegistryProcess>(
      std::vector<std::string>{"--state", state, "--listen", "127.0.0.1:" + port});
  // The same channel reconnects; the names came back from the state file.
  EXPECT_EQ(channel.fetch("kept", 2s), sample_metadata(1));
  EXPECT_EQ(channel.fetch("expiring", 2s), sample_metadata(2));
  // The serving side registers again by itself (its pollers back off up to 1 s meanwhile).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    try {
      channel.request("svc.b", sample_metadata(3, OperationKind::Write), 2s);
      break;
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::NotFound) << e.what();
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "serve never came back";
    }
    std::this_thread::sleep_for(50ms);  // the re-registration happens in another thread
  }
}

TEST(HttpProcesses, RegistryFlagsAreChecked) {
  EXPECT_EQ(run({memwire::test::registry_program(), "--listen", "nonsense"}), 2);
  EXPECT_EQ(run({memwire::test::registry_program(), "--bogus"}), 2);
  EXPECT_EQ(run({memwire::test::registry_program(), "--tls-cert", "/nonexistent", "--tls-key",
                 "/nonexistent"}),
            1);
}

}  // namespace

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace

// Issue 14 item 10: an empty --token-file silently turned authentication off, and a CRLF file
// gave a token ending in '\r' that no client could send.
TEST(HttpProcesses, RegistryTokenFileIsCheckedAndTrimmed) {
  test_support::TempDir dir;
  write_text(dir.file("empty"), "");
  write_text(dir.file("newline-only"), "\n");
  write_text(dir.file("two-lines"), "s3cret\nmore\n");
  write_text(dir.file("control"),
             "s3\x01"
             "cret");
  for (const char* bad : {"empty", "newline-only", "two-lines", "control"}) {
    EXPECT_EQ(run({memwire::test::registry_program(), "--listen", "127.0.0.1:0", "--token-file",
                   dir.file(bad)}),
              2)
        << bad;
  }
  for (const char* text : {"s3cret\r\n", "s3cret\n", "s3cret"}) {
    write_text(dir.file("token"), text);
    RegistryProcess registry({"--token-file", dir.file("token")});
    httplib::Client client("127.0.0.1", std::stoi(registry.port()));
    EXPECT_EQ(client.Get("/v1/metadata")->status, 401);
    EXPECT_EQ(client.Get("/v1/metadata", {{"Authorization", "Bearer s3cret"}})->status, 200)
        << "token file " << nlohmann::json(text).dump();
    EXPECT_EQ(registry.stop(), 0);
  }
}

// The limits are options of the registry, checked at start.
TEST(HttpProcesses, RegistryLimitFlagsAreChecked) {
  EXPECT_EQ(run({memwire::test::registry_program(), "--max-connections", "0"}), 2);
  EXPECT_EQ(
      run({memwire::test::registry_program(), "--max-connections", "8", "--max-long-polls", "8"}),
      2);
  EXPECT_EQ(run({memwire::test::registry_program(), "--max-body-bytes", "0"}), 2);
  // Durations that would overflow a deadline (they wrapped to negative before).
  EXPECT_EQ(run({memwire::test::registry_program(), "--request-read-ms", "18446744073709551615"}),
            2);
  EXPECT_EQ(run({memwire::test::registry_program(), "--ttl-sweep-ms", "9223372036854775808"}), 2);
  RegistryProcess registry({"--max-body-bytes", "100", "--max-connections", "64",
                            "--max-long-polls", "16", "--request-read-ms", "500"});
  httplib::Client client("127.0.0.1", std::stoi(registry.port()));
  auto put = client.Put("/v1/metadata/a", std::string(101, ' '), "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 413);
  EXPECT_EQ(registry.stop(), 0);
}
