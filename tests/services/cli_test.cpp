// The memwire CLI as a real program: serve and get between processes over a real
// memwire-registry and a real nats-server, what get does to the file system, and how command
// lines are checked.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "support/built_programs.hpp"
#include "support/channels.hpp"
#include "support/child_process.hpp"
#include "support/nats_server.hpp"
#include "support/registry_process.hpp"
#include "support/sanitizers.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using memwire::test_support::ChildProcess;
using memwire::test_support::RegistryProcess;
using memwire::test_support::TempDir;
namespace fs = std::filesystem;

const std::string kCli = memwire::test::cli_program();

struct Outcome {
  int status = -1;  // -1: still running at the limit (then killed)
  std::string out;
  std::string err;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the CLI to its end (at most `limit`), with its stdout and stderr. `shell_prefix` runs
// before it in the same shell (e.g. "ulimit -d N").
Outcome run_cli(const TempDir& dir, std::vector<std::string> args,
                std::chrono::milliseconds limit = 30s, const std::string& shell_prefix = "true",
                const std::vector<std::string>& environment = {}) {
  static int serial = 0;
  auto err_path = dir.file("stderr." + std::to_string(++serial));
  std::vector<std::string> argv{"/bin/sh", "-c", shell_prefix + " && exec \"$@\" 2>\"$MW_STDERR\"",
                                "sh", kCli};
  argv.insert(argv.end(), args.begin(), args.end());
  auto env = environment;
  env.push_back("MW_STDERR=" + err_path);
  ChildProcess process(argv, env);
  Outcome outcome;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (auto line =
             process.read_line(std::max(1ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now())))) {
    outcome.out += *line + "\n";
  }
  outcome.status = process
                       .wait(std::max(1ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                               deadline - std::chrono::steady_clock::now())))
                       .value_or(-1);
  outcome.err = read_all(err_path);
  fs::remove(err_path);
  return outcome;
}

void write_pattern(const std::string& path, std::size_t size, unsigned seed) {
  std::ofstream out(path, std::ios::binary);
  std::string block(1 << 16, '\0');
  for (std::size_t done = 0; done < size; done += block.size()) {
    for (std::size_t i = 0; i < block.size(); ++i)
      block[i] = static_cast<char>(((done + i) * 131 + seed) & 0xff);
    out.write(block.data(), static_cast<std::streamsize>(std::min(block.size(), size - done)));
  }
}

bool same_file(const std::string& a, const std::string& b) {
  return fs::file_size(a) == fs::file_size(b) && read_all(a) == read_all(b);
}

// Files in `dir` whose name ends with ".part": what a get must never leave behind.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().string().ends_with(".part")) found.push_back(entry.path().string());
  return found;
}

// `memwire serve` in the background; ready once it said "published".
class Server {
 public:
  Server(std::vector<std::string> args, const std::vector<std::string>& environment = {}) {
    args.insert(args.begin(), kCli);
    process_ = std::make_unique<ChildProcess>(args, environment);
    auto line = process_->read_line(20s);
    if (!line || !line->starts_with("published"))
      throw std::runtime_error("serve did not publish: " + line.value_or("(nothing)"));
  }
  ChildProcess& process() { return *process_; }
  // SIGTERM, then its exit status.
  int stop() {
    process_->kill(SIGTERM);
    return process_->wait(10s).value_or(-1);
  }

 private:
  std::unique_ptr<ChildProcess> process_;
};

// One sideband per test: a registry or a nats-server.
class CliOverChannel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "nats") {
      nats_ = std::make_unique<memwire::test_support::NatsServer>();
      channel_ = {"--nats", nats_->url()};
    } else {
      registry_ = std::make_unique<RegistryProcess>();
      channel_ = {"--http", registry_->url()};
    }
  }
  std::vector<std::string> with_channel(std::vector<std::string> args) const {
    args.insert(args.end(), channel_.begin(), channel_.end());
    return args;
  }

  std::unique_ptr<memwire::test_support::NatsServer> nats_;
  std::unique_ptr<RegistryProcess> registry_;
  std::vector<std::string> channel_;
  TempDir dir_;
};

// Issue 14 item 3: `serve --count 0` used to vanish once its metadata's lifetime passed (10 min
// by default; 1 s here): nothing renewed the name nor the memory's access.
TEST_P(CliOverChannel, ServeCountZeroOutlivesTheMetadataLifetime) {
  auto in = dir_.file("in.bin");
  write_pattern(in, 1 << 20, 3);
  Server server(
      with_channel({"serve", "cli.long", in, "--count", "0", "--metadata-ttl-ms", "1000"}));
  for (const char* out : {"out1.bin", "out2.bin"}) {
    std::this_thread::sleep_for(2500ms);  // two and a half lifetimes
    auto got = run_cli(dir_, with_channel({"get", "cli.long", dir_.file(out), "--timeout", "10"}));
    EXPECT_EQ(got.status, 0) << got.err;
    EXPECT_TRUE(fs::exists(dir_.file(out)) && same_file(in, dir_.file(out))) << out;
  }
  EXPECT_EQ(server.stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Channels, CliOverChannel,
                         ::testing::ValuesIn(memwire::test_support::enabled_channels()),
                         [](const auto& info) { return info.param; });

// The environment of a program that moves bytes over tcp alone.
const std::vector<std::string> kTcpOnly{"MEMWIRE_TRANSPORTS=tcp"};

class Cli : public ::testing::Test {
 protected:
  std::vector<std::string> with_registry(std::vector<std::string> args) const {
    args.insert(args.end(), {"--http", registry_.url()});
    return args;
  }
  // The owner of "cli.stalled" (4 MiB, the pattern of `seed`) over tcp alone, stopped
  // (SIGSTOP): its kernel still accepts connections, and nothing answers them.
  Server stalled_owner(unsigned seed) const {
    auto in = dir_.file("in.bin");
    write_pattern(in, 4 << 20, seed);
    Server server(with_registry({"serve", "cli.stalled", in}), kTcpOnly);
    server.process().kill(SIGSTOP);
    return server;
  }
  RegistryProcess registry_;
  TempDir dir_;
};

// Issue 14 item 9: a symlink or FIFO at OUT was replaced by a regular file, an existing
// OUT.part link was followed (its target overwritten), and OUT being a folder left a full
// OUT.part behind.
// Issue 23, finding 8: the programs could not say how many copies of the registry bucket to
// create. --kv-replicas N (0..5) now reaches NatsOptions::kv_replicas, and is checked.
// A build without NATS has no --kv-replicas (nor --nats) at all: nothing to check there.
#if MEMWIRE_HAVE_NATS
TEST(CliKvReplicas, TheFlagIsTakenAndChecked) {
  memwire::test_support::NatsServer nats;
  TempDir dir;
  auto taken = run_cli(dir, {"ls", "--nats", nats.url(), "--kv-replicas", "1"});
  EXPECT_EQ(taken.status, 0) << taken.err;
  for (const char* bad : {"6", "-1", "x"}) {
    auto refused = run_cli(dir, {"ls", "--nats", nats.url(), "--kv-replicas", bad});
    EXPECT_EQ(refused.status, 2) << bad << ": " << refused.err;
    EXPECT_NE(refused.err.find("--kv-replicas"), std::string::npos) << refused.err;
  }
  // --inbox-prefix reaches NatsOptions::inbox_prefix: a wildcard prefix is refused.
  auto own_inbox = run_cli(dir, {"ls", "--nats", nats.url(), "--inbox-prefix", "_INBOX_cli"});
  EXPECT_EQ(own_inbox.status, 0) << own_inbox.err;
  auto wildcard = run_cli(dir, {"ls", "--nats", nats.url(), "--inbox-prefix", "_INBOX.>"});
  EXPECT_NE(wildcard.status, 0);
  EXPECT_NE(wildcard.err.find("inbox_prefix"), std::string::npos) << wildcard.err;
}
#endif

TEST_F(Cli, GetWritesOnlyRegularFilesAndLeavesNothingBehind) {
  auto in = dir_.file("in.bin");
  write_pattern(in, 1 << 20, 5);
  Server server(with_registry({"serve", "cli.file", in, "--count", "0"}));
  const std::string victim_text = "precious\n";
  auto victim = dir_.file("victim.txt");
  std::ofstream(victim) << victim_text;

  auto link = dir_.file("link.bin");
  fs::create_symlink(victim, link);
  auto fifo = dir_.file("fifo.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto folder = dir_.file("folder");
  fs::create_directory(folder);
  for (const auto& target : {link, fifo, folder}) {
    auto got = run_cli(dir_, with_registry({"get", "cli.file", target, "--timeout", "10"}), 10s);
    EXPECT_EQ(got.status, 2) << target << ": " << got.err;
    EXPECT_NE(got.err.find("regular files"), std::string::npos) << got.err;
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_directory(folder) && fs::is_empty(folder));
  EXPECT_TRUE(read_all(victim) == victim_text) << "the victim was overwritten";

  // A link where the old fixed temporary name was: neither followed nor removed.
  auto out = dir_.file("out.bin");
  fs::create_symlink(victim, out + ".part");
  auto got = run_cli(dir_, with_registry({"get", "cli.file", out, "--timeout", "10"}));
  EXPECT_EQ(got.status, 0) << got.err;
  EXPECT_TRUE(same_file(in, out));
  EXPECT_TRUE(fs::is_symlink(out + ".part"));
  EXPECT_TRUE(read_all(victim) == victim_text) << "the victim was overwritten";
  fs::remove(out + ".part");

  // An existing regular file is replaced whole.
  std::ofstream(out) << "old";
  got = run_cli(dir_, with_registry({"get", "cli.file", out, "--timeout", "10"}));
  EXPECT_EQ(got.status, 0) << got.err;
  EXPECT_TRUE(same_file(in, out));
  EXPECT_EQ(leftovers(dir_.path()), std::vector<std::string>{});
  EXPECT_EQ(server.stop(), 0);
}

// Issue 14 items 9 and 14: a read that times out leaves no temporary file, and says after how
// long it gave up (it said "after 1 ms" after the whole --timeout).
TEST_F(Cli, TimedOutGetReportsItsTimeoutAndCleansUp) {
  auto server = stalled_owner(6);
  auto out = dir_.file("out.bin");
  auto started = std::chrono::steady_clock::now();
  auto got = run_cli(dir_, with_registry({"get", "cli.stalled", out, "--timeout", "1.5"}), 20s,
                     "true", kTcpOnly);
  auto took = std::chrono::steady_clock::now() - started;
  server.process().kill(SIGCONT);
  EXPECT_EQ(got.status, 4) << got.err;
  EXPECT_NE(got.err.find("after 1.5 s"), std::string::npos) << got.err;
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, 10s);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(leftovers(dir_.path()), std::vector<std::string>{});
}

// A get ended by SIGTERM or SIGINT mid-read removes its temporary file and exits as the signal
// would have (128 + signal).
TEST_F(Cli, InterruptedGetRemovesItsTemporaryFile) {
  auto server = stalled_owner(11);
  for (int signal : {SIGTERM, SIGINT}) {
    std::vector<std::string> args{kCli,        "get", "cli.stalled", dir_.file("out.bin"),
                                  "--timeout", "30",  "--http",      registry_.url()};
    ChildProcess get(args, kTcpOnly);
    // The temporary file appears once the read started.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (leftovers(dir_.path()).empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    ASSERT_EQ(leftovers(dir_.path()).size(), 1u);
    get.kill(signal);
    EXPECT_EQ(get.wait(10s), 128 + signal);
    EXPECT_EQ(leftovers(dir_.path()), std::vector<std::string>{});
    EXPECT_FALSE(fs::exists(dir_.file("out.bin")));
  }
  server.process().kill(SIGCONT);
}

// Issue 14 item 11: --timeout nan|inf|1e300 timed out at once, 9.3e12 hung; every number on the
// command line is now checked (exit status 2, a message naming the flag).
TEST_F(Cli, NumbersOnTheCommandLineAreCheckedStrictly) {
  auto in = dir_.file("in.bin");
  write_pattern(in, 4096, 7);
  auto out = dir_.file("out.bin");
  for (const char* timeout : {"nan", "inf", "-inf", "1e300", "9.3e12", "0", "-1", "0.0001", "",
                              "1x", " 5", "+5", "0x10", "40000000"}) {
    auto got = run_cli(dir_, with_registry({"get", "cli.none", out, "--timeout", timeout}), 10s);
    EXPECT_EQ(got.status, 2) << "--timeout '" << timeout << "': " << got.err;
    EXPECT_NE(got.err.find("--timeout"), std::string::npos) << got.err;
  }
  const std::vector<std::vector<std::string>> bad_serves{
      {"--count", "-1"},
      {"--count", "1.5"},
      {"--count", "99999999999999999999999"},
      {"--ttl-ms", "-5"},
      {"--ttl-ms", "18446744073709551615"},
      {"--ttl-ms", "9300000000000"},
      {"--metadata-ttl-ms", "0"},
      {"--metadata-ttl-ms", "50"},
      {"--metadata-ttl-ms", "nan"},
  };
  for (const auto& flag : bad_serves) {
    auto args = with_registry({"serve", "cli.bad", in});
    args.insert(args.end(), flag.begin(), flag.end());
    auto got = run_cli(dir_, args, 10s);
    EXPECT_EQ(got.status, 2) << flag[0] << " " << flag[1] << ": " << got.err;
    EXPECT_NE(got.err.find(flag[0]), std::string::npos) << got.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

// Issue 14 item 14: an invalid name is a usage error (it exited 1, as a failure).
TEST_F(Cli, InvalidNamesAreUsageErrors) {
  auto in = dir_.file("in.bin");
  write_pattern(in, 4096, 8);
  for (const char* name : {"bad..name", "a b", "", ".x", "x/y"}) {
    EXPECT_EQ(run_cli(dir_, with_registry({"get", name, dir_.file("out.bin")})).status, 2) << name;
    EXPECT_EQ(run_cli(dir_, with_registry({"serve", name, in})).status, 2) << name;
  }
}

// Issue 14 item 14: progress showed no bytes done, and a final rate that disagreed with the one
// printed on stdout (two clocks). Both now come from one measured transfer.
TEST_F(Cli, ProgressShowsBytesAndTheRateThatGetReports) {
  auto in = dir_.file("in.bin");
  write_pattern(in, 16 << 20, 9);
  Server server(with_registry({"serve", "cli.progress", in}));
  auto got = run_cli(dir_, with_registry({"get", "cli.progress", dir_.file("out.bin"), "--progress",
                                          "--timeout", "20"}));
  ASSERT_EQ(got.status, 0) << got.err;
  std::smatch stdout_rate, progress_rate;
  ASSERT_TRUE(std::regex_search(got.out, stdout_rate, std::regex(R"(\(([0-9.]+ [KMGT]?i?B/s);)")))
      << got.out;
  // The last redraw: "NAME [====] 16.0 MiB/16.0 MiB 0.05s RATE".
  auto last = got.err.substr(got.err.rfind('\r') + 1);
  EXPECT_NE(last.find("16.0 MiB/16.0 MiB"), std::string::npos) << last;
  ASSERT_TRUE(std::regex_search(last, progress_rate, std::regex(R"(s ([0-9.]+ [KMGT]?i?B/s))")))
      << last;
  EXPECT_EQ(stdout_rate[1], progress_rate[1]) << got.out << last;
  EXPECT_EQ(server.process().wait(10s), 0);
}

// Issue 14 item 10 (CLI side): --token-file, one line; CRLF endings work, empty files and
// stray control characters are refused (an empty token would turn authentication off).
TEST(CliTokenFile, TokenFilesAreReadStrictly) {
  RegistryProcess registry({"--token", "s3cret"});
  TempDir dir;
  auto token_file = [&](const std::string& name, const std::string& content) {
    auto path = dir.file(name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
  };
  auto ls = [&](std::vector<std::string> auth) {
    std::vector<std::string> args{"ls", "--http", registry.url()};
    args.insert(args.end(), auth.begin(), auth.end());
    return run_cli(dir, args, 10s);
  };
  EXPECT_EQ(ls({"--token-file", token_file("lf", "s3cret\n")}).status, 0);
  EXPECT_EQ(ls({"--token-file", token_file("crlf", "s3cret\r\n")}).status, 0);
  EXPECT_EQ(ls({"--token-file", token_file("bare", "s3cret")}).status, 0);
  auto empty = ls({"--token-file", token_file("empty", "")});
  EXPECT_EQ(empty.status, 2);
  EXPECT_NE(empty.err.find("empty"), std::string::npos) << empty.err;
  EXPECT_EQ(ls({"--token-file", token_file("newline", "\n")}).status, 2);
  EXPECT_EQ(ls({"--token-file", token_file("cr", "s3cret\r")}).status, 2);
  EXPECT_EQ(ls({"--token-file", token_file("two", "s3cret\n\n")}).status, 2);
  EXPECT_EQ(ls({"--token-file", dir.file("missing")}).status, 2);
  EXPECT_EQ(ls({"--token-file", token_file("both", "s3cret"), "--token", "s3cret"}).status, 2);
  EXPECT_EQ(ls({"--token-file", token_file("wrong", "other\n")}).status, 1);
}

// Issue 14 item 9: serve and get held the whole file in anonymous memory (1 GiB file: 1.06 GB
// resident on each side). Under a data limit (RLIMIT_DATA counts private memory, not shared file
// mappings) smaller than the file, both must still move it.
TEST_F(Cli, ServeAndGetDoNotCopyTheFileIntoMemory) {
#if MEMWIRE_TEST_UNDER_SANITIZER
  GTEST_SKIP() << "sanitizer runtimes reserve private memory beyond any data limit";
#endif
  constexpr std::size_t kSize = 256u << 20;
  const std::string limit = "ulimit -d " + std::to_string(160 * 1024);  // KiB: 160 MiB
  auto in = dir_.file("in.bin");
  write_pattern(in, kSize, 10);
  auto out = dir_.file("out.bin");
  auto argv = with_registry({"serve", "cli.big", in});
  std::vector<std::string> shell{"/bin/sh", "-c", limit + " && exec \"$@\"", "sh", kCli};
  shell.insert(shell.end(), argv.begin(), argv.end());
  ChildProcess server(shell);
  auto published = server.read_line(30s);
  ASSERT_TRUE(published && published->starts_with("published")) << published.value_or("(none)");
  auto got = run_cli(dir_, with_registry({"get", "cli.big", out, "--timeout", "60"}), 90s, limit);
  EXPECT_EQ(got.status, 0) << got.err;
  EXPECT_TRUE(fs::exists(out) && same_file(in, out));
  EXPECT_EQ(server.wait(20s), 0);
}

}  // namespace
