// The parts the programs are built from, directly: argument checks, token files, the files
// `memwire get` writes and the progress line.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/mapped_file.hpp"
#include "cli/progress.hpp"
#include "common/arguments.hpp"
#include "common/token_file.hpp"
#include "memwire/error.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using memwire::services::Arguments;
using memwire::services::UsageError;
namespace fs = std::filesystem;

Arguments parse(std::vector<std::string> words) {
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  return Arguments(static_cast<int>(argv.size()), argv.data(), 0,
                   {"--timeout", "--count", "--ttl-ms"});
}

TEST(Arguments, SecondsMustBeFinitePositiveAndBounded) {
  EXPECT_EQ(parse({"--timeout", "2.5"}).get_seconds("--timeout", 30s), 2500ms);
  EXPECT_EQ(parse({"--timeout", "1e3"}).get_seconds("--timeout", 30s), 1000s);
  EXPECT_EQ(parse({"--timeout", "0.001"}).get_seconds("--timeout", 30s), 1ms);
  EXPECT_EQ(parse({}).get_seconds("--timeout", 30s), 30s);
  EXPECT_EQ(parse({"--timeout", "31536000"}).get_seconds("--timeout", 30s),
            memwire::services::kMaxDuration);
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "infinity", "1e300", "9.3e12", "31536000.5",
                          "0", "-0", "-1", "0.0004", "", " 1", "1 ", "+1", "1x", "0x10", "1e"}) {
    EXPECT_THROW(parse({"--timeout", bad}).get_seconds("--timeout", 30s), UsageError) << bad;
  }
}

TEST(Arguments, WholeNumbersAreCheckedAgainstTheirRange) {
  EXPECT_EQ(parse({"--count", "0"}).get_uint("--count", 1), 0u);
  EXPECT_EQ(parse({"--count", "18446744073709551615"}).get_uint("--count", 1), UINT64_MAX);
  for (const char* bad : {"-1", "1.5", "", "+3", " 3", "3 ", "18446744073709551616", "0x3"}) {
    EXPECT_THROW(parse({"--count", bad}).get_uint("--count", 1), UsageError) << bad;
  }
  EXPECT_THROW(parse({"--count", "11"}).get_uint("--count", 1, 1, 10), UsageError);
  EXPECT_THROW(parse({"--count", "0"}).get_uint("--count", 1, 1, 10), UsageError);
  EXPECT_EQ(parse({"--ttl-ms", "5"}).get_milliseconds("--ttl-ms", 0ms, 0ms), 5ms);
  EXPECT_THROW(parse({"--ttl-ms", "9300000000000"}).get_milliseconds("--ttl-ms", 0ms, 0ms),
               UsageError);
  EXPECT_THROW(parse({"--ttl-ms", "18446744073709551615"}).get_milliseconds("--ttl-ms", 0ms, 0ms),
               UsageError);
}

class TokenFile : public ::testing::Test {
 protected:
  std::string file(const std::string& content) {
    auto path = dir_.file("token." + std::to_string(++serial_));
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  memwire::test_support::TempDir dir_;
  int serial_ = 0;
};

TEST_F(TokenFile, OneTrailingLineEndIsStripped) {
  using memwire::services::read_token_file;
  EXPECT_EQ(read_token_file(file("s3cret")), "s3cret");
  EXPECT_EQ(read_token_file(file("s3cret\n")), "s3cret");
  EXPECT_EQ(read_token_file(file("s3cret\r\n")), "s3cret");
  EXPECT_EQ(read_token_file(file("with space")), "with space");
}

TEST_F(TokenFile, EmptyFilesAndControlCharactersAreRefused) {
  using memwire::services::read_token_file;
  for (const std::string& bad :
       {std::string(""), std::string("\n"), std::string("\r\n"), std::string("s3cret\r"),
        std::string("s3cret\n\n"), std::string("s3\ncret"), std::string("s3\tcret"),
        std::string("s3cret\r\n\r\n"), std::string("s3\0cret", 7), std::string("s3\x7f")}) {
    EXPECT_THROW(read_token_file(file(bad)), UsageError) << testing::PrintToString(bad);
  }
  EXPECT_THROW(read_token_file(dir_.file("missing")), UsageError);
  EXPECT_THROW(read_token_file(file(std::string(64 * 1024 + 1, 'a'))), UsageError);
  EXPECT_EQ(read_token_file(file(std::string(64 * 1024, 'a'))).size(), 64u * 1024);
}

TEST(ProgressLine, RunningLineShowsBytesDone) {
  using memwire::cli::Progress;
  auto line = Progress::running_line("n", 512u << 20, 1u << 30, 1500ms, 0);
  EXPECT_NE(line.find("512.0 MiB/1.0 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find("[===============>"), std::string::npos) << line;
  EXPECT_NE(line.find("1.5s"), std::string::npos) << line;
  auto unknown = Progress::running_line("n", std::nullopt, 1u << 30, 1500ms, 3);
  EXPECT_NE(unknown.find("?/1.0 GiB"), std::string::npos) << unknown;
}

TEST(ProgressLine, FinalLineUsesTheGivenDuration) {
  using memwire::cli::Progress;
  auto line = Progress::final_line("n", true, 1u << 30, 2s);
  EXPECT_NE(line.find("1.0 GiB/1.0 GiB 2.00s 512.0 MiB/s"), std::string::npos) << line;
  EXPECT_EQ(Progress::rate(1u << 30, 2s), "512.0 MiB/s");
  EXPECT_NE(Progress::final_line("n", false, 10, 1s).find("failed"), std::string::npos);
}

class OutputFileTest : public ::testing::Test {
 protected:
  memwire::test_support::TempDir dir_;
  std::vector<std::string> parts() const {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir_.path()))
      if (entry.path().string().ends_with(".part")) found.push_back(entry.path().string());
    return found;
  }
};

TEST_F(OutputFileTest, CommitReplacesOutAndCountsWrittenBytes) {
  auto out = dir_.file("out.bin");
  std::ofstream(out) << "old";
  constexpr std::size_t kSize = 8u << 20;
  {
    memwire::cli::OutputFile output(out, kSize);
    EXPECT_EQ(fs::file_size(out), 3u);  // OUT untouched until commit()
    auto before = output.bytes_written();
    std::memset(output.data(), 0x5a, kSize / 2);
    auto after = output.bytes_written();
    // ext4 and most disk file systems count; tmpfs reserves in memory and says "unknown".
    if (before) {
      EXPECT_EQ(*before, 0u);
      ASSERT_TRUE(after);
      EXPECT_GE(*after, kSize / 2);
      EXPECT_LT(*after, kSize / 2 + (1u << 20));
    }
    std::memset(output.data() + kSize / 2, 0x5a, kSize / 2);
    output.commit();
  }
  EXPECT_EQ(fs::file_size(out), kSize);
  EXPECT_TRUE(parts().empty());
}

TEST_F(OutputFileTest, UncommittedFilesAreRemovedAndTargetsChecked) {
  auto out = dir_.file("out.bin");
  {
    memwire::cli::OutputFile output(out, 4096);
    EXPECT_EQ(parts().size(), 1u);
  }
  EXPECT_TRUE(parts().empty());
  EXPECT_FALSE(fs::exists(out));
  // More than the file system has free: refused before any byte moves, nothing left behind.
  EXPECT_THROW(memwire::cli::OutputFile(out, 1ull << 50), memwire::Error);
  EXPECT_TRUE(parts().empty());
  fs::create_directory(dir_.file("folder"));
  EXPECT_THROW(memwire::cli::OutputFile::check_target(dir_.file("folder")), UsageError);
  fs::create_symlink(out, dir_.file("link"));
  EXPECT_THROW(memwire::cli::OutputFile::check_target(dir_.file("link")), UsageError);
  ASSERT_EQ(::mkfifo(dir_.file("fifo").c_str(), 0600), 0);
  EXPECT_THROW(memwire::cli::OutputFile::check_target(dir_.file("fifo")), UsageError);
  EXPECT_NO_THROW(memwire::cli::OutputFile::check_target(out));
}

TEST_F(OutputFileTest, InputFileRefusesWhatItCannotServe) {
  EXPECT_THROW(memwire::cli::InputFile(dir_.file("missing")), memwire::Error);
  std::ofstream(dir_.file("empty"));
  EXPECT_THROW(memwire::cli::InputFile(dir_.file("empty")), memwire::Error);
  ASSERT_EQ(::mkfifo(dir_.file("fifo").c_str(), 0600), 0);
  EXPECT_THROW(memwire::cli::InputFile(dir_.file("fifo")), memwire::Error);  // and does not block
  std::ofstream(dir_.file("data")) << "abc";
  memwire::cli::InputFile input(dir_.file("data"));
  ASSERT_EQ(input.size(), 3u);
  EXPECT_EQ(std::memcmp(input.data(), "abc", 3), 0);
}

}  // namespace
