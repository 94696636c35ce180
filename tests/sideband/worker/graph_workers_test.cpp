// The example graph workers and the CLI as separate processes, over both channels: a real
// nats-server (JetStream, free port, temporary store) and a real memwire-registry.
#include <gtest/gtest.h>

#include <fstream>

#include "support/built_programs.hpp"
#include "support/channels.hpp"
#include "support/child_process.hpp"
#include "support/nats_server.hpp"
#include "support/registry_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using memwire::test_support::ChildProcess;
using memwire::test_support::RegistryProcess;

// One sideband server per test: the channel flag and URL the programs are given.
class GraphWorkers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "nats") {
      nats_ = std::make_unique<memwire::test_support::NatsServer>();
      flag_ = "--nats";
      url_ = nats_->url();
    } else {
      registry_ = std::make_unique<RegistryProcess>();
      flag_ = "--http";
      url_ = registry_->url();
    }
  }
  // Runs producer and consumer side by side; returns the consumer's last line.
  std::string pair(const std::string& producer_mode, const std::string& consumer_mode) {
    ChildProcess consumer({memwire::test::consumer_program(), flag_, url_, "--mode", consumer_mode,
                           "--requests", "4", "--dim", "65536", "--prefix", "t." + GetParam()});
    ChildProcess producer({memwire::test::producer_program(), flag_, url_, "--mode", producer_mode,
                           "--requests", "4", "--dim", "65536", "--prefix", "t." + GetParam()});
    std::string last;
    while (auto line = consumer.read_line(60s)) last = *line;
    EXPECT_EQ(consumer.wait(30s), 0) << last;
    EXPECT_EQ(producer.wait(30s), 0);
    return last;
  }
  int cli(std::vector<std::string> args) {
    args.insert(args.begin(), memwire::test::cli_program());
    args.insert(args.end(), {flag_, url_});
    ChildProcess process(args);
    return process.wait(30s).value_or(-1);
  }

  std::unique_ptr<memwire::test_support::NatsServer> nats_;
  std::unique_ptr<RegistryProcess> registry_;
  std::string flag_;
  std::string url_;
};

TEST_P(GraphWorkers, ConsumerReadsTheProducersReadableMemory) {
  auto last = pair("readable", "read");
  EXPECT_NE(last.find("4/4 embeddings verified"), std::string::npos) << last;
  EXPECT_NE(last.find("metadata by " + GetParam()), std::string::npos) << last;
}

TEST_P(GraphWorkers, ProducerWritesIntoTheConsumersWritableMemory) {
  auto last = pair("writable", "request");
  EXPECT_NE(last.find("4/4 embeddings verified"), std::string::npos) << last;
  EXPECT_NE(last.find("producer wrote into consumer's writable memory"), std::string::npos) << last;
}

TEST_P(GraphWorkers, CliServeGetLsAndExitCodes) {
  memwire::test_support::TempDir dir;
  auto in = dir.file("in.bin"), out = dir.file("out.bin");
  {
    std::ofstream file(in, std::ios::binary);
    for (int i = 0; i < 100000; ++i) file.put(static_cast<char>(i * 7));
  }
  ChildProcess server({memwire::test::cli_program(), "serve", "cli.file", in, flag_, url_});
  auto published = server.read_line(20s);
  ASSERT_TRUE(published && published->starts_with("published cli.file")) << published.value_or("");
  EXPECT_EQ(cli({"ls"}), 0);
  EXPECT_EQ(cli({"get", "cli.file", out, "--timeout", "10"}), 0);
  EXPECT_EQ(server.wait(20s), 0);
  std::ifstream a(in, std::ios::binary), b(out, std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b)));
  EXPECT_EQ(cli({"get", "cli.missing", out}), 3);
  EXPECT_EQ(cli({"get", "cli.missing", out, "--wait", "--timeout", "0.3"}), 4);
  EXPECT_EQ(cli({"get", "bad..name", out}), 2);  // a usage error
}

INSTANTIATE_TEST_SUITE_P(Channels, GraphWorkers,
                         ::testing::ValuesIn(memwire::test_support::enabled_channels()),
                         [](const auto& info) { return info.param; });

}  // namespace
