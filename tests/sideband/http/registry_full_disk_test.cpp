// Issue 23, finding 5: memwire-registry --state on a disk that fills up. A PUT whose append
// failed was still answered 204 (55 of 200 acknowledged names were gone after a restart), and a
// compaction that failed at start-up left the log closed for the rest of the run. The disk is a
// real one: a small tmpfs, mounted in the registry's own mount namespace (unshare -rm), so it
// fills with a real ENOSPC and nothing of it is seen outside; the test reads the state file
// through /proc/PID/root, where the registry's namespace shows it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <set>

#include "http/server/metadata_store.hpp"
#include "support/built_programs.hpp"
#include "support/child_process.hpp"
#include "support/metadata_samples.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using memwire::sideband::http::MetadataStore;
using memwire::test_support::ChildProcess;
using memwire::test_support::sample_metadata;
using memwire::test_support::TempDir;

constexpr const char* kUnshare = "/usr/bin/unshare";  // util-linux

// A registry whose --state lives on a tmpfs of `size` mounted at `disk`; `prepare` runs in its
// namespace first (with the disk as $0).
class RegistryOnSmallDisk {
 public:
  RegistryOnSmallDisk(const std::string& disk, const std::string& size,
                      const std::string& prepare) {
    std::filesystem::create_directories(disk);
    if (!std::filesystem::exists(kUnshare)) return;
    process_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        kUnshare, "-rm", "/bin/sh", "-c",
        "mount -t tmpfs -o size=" + size + " tmpfs \"$0\" || exit 3; " + prepare + "; exec \"$@\"",
        disk, memwire::test::registry_program(), "--quiet-requests", "--listen", "127.0.0.1:0",
        "--state", disk + "/state"});
    auto line = process_->read_line(10s);
    if (line && line->starts_with("http")) url_ = *line;
    disk_in_namespace_ = "/proc/" + std::to_string(process_->pid()) + "/root" + disk;
  }
  ~RegistryOnSmallDisk() {
    if (!process_) return;
    process_->kill(SIGTERM);
    process_->wait(10s);
  }
  bool started() const { return !url_.empty(); }
  std::string port() const { return url_.substr(url_.rfind(':') + 1); }
  // A path on the registry's disk, as this process reaches it.
  std::string on_disk(const std::string& name) const { return disk_in_namespace_ + "/" + name; }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string url_;
  std::string disk_in_namespace_;
};

int put(httplib::Client& client, const std::string& name, unsigned seed) {
  auto answer =
      client.Put("/v1/metadata/" + name, sample_metadata(seed).to_json(), "application/json");
  return answer ? answer->status : -1;
}

// What a restarted registry would load from the state file as it is now.
std::unique_ptr<MetadataStore> reload(const std::string& state, const TempDir& dir) {
  const auto copy = dir.file("reloaded");
  std::filesystem::copy_file(state, copy, std::filesystem::copy_options::overwrite_existing);
  return std::make_unique<MetadataStore>(copy);
}

TEST(RegistryFullDisk, APutThatWasNotSavedIsNotAcknowledged) {
  TempDir dir;
  RegistryOnSmallDisk registry(dir.file("disk"), "32k", "true");
  if (!registry.started()) GTEST_SKIP() << "cannot mount a tmpfs in a user namespace here";
  httplib::Client client("127.0.0.1", std::stoi(registry.port()));
  std::set<std::string> acknowledged;
  int refused = 0;
  for (unsigned n = 0; n < 200; ++n) {
    const auto name = "name" + std::to_string(n);
    const int status = put(client, name, n);
    if (status == 204)
      acknowledged.insert(name);
    else
      ++refused;
  }
  auto reloaded = reload(registry.on_disk("state"), dir);
  std::size_t lost = 0;
  for (const auto& name : acknowledged)
    if (!reloaded->get(name)) ++lost;
  std::cout << acknowledged.size() << " PUTs acknowledged, " << refused << " refused, " << lost
            << " acknowledged ones missing from the state file\n";
  EXPECT_GT(refused, 0) << "the disk never filled, or a PUT it did not take was acknowledged";
  EXPECT_GT(acknowledged.size(), 10u);
  EXPECT_EQ(lost, 0u) << "acknowledged names missing from the state file";
  // A refused PUT is not served either: what a client was told matches what a restart keeps.
  EXPECT_EQ(reloaded->size(), acknowledged.size());
}

TEST(RegistryFullDisk, AFailedStartUpCompactionStillSavesLaterChanges) {
  TempDir dir;
  {
    MetadataStore earlier(dir.file("earlier"));
    earlier.put("earlier", sample_metadata(1).to_json(), 0ms);
  }
  // The old log is copied in, then the disk is filled: compaction cannot write its new log.
  RegistryOnSmallDisk registry(dir.file("disk"), "32k",
                               "cp '" + dir.file("earlier") +
                                   "' \"$0/state\" && (dd if=/dev/zero of=\"$0/filler\" bs=1k "
                                   "2>/dev/null; true)");
  if (!registry.started()) GTEST_SKIP() << "cannot mount a tmpfs in a user namespace here";
  httplib::Client client("127.0.0.1", std::stoi(registry.port()));
  std::filesystem::remove(registry.on_disk("filler"));  // room again
  ASSERT_EQ(put(client, "later", 2), 204);
  auto reloaded = reload(registry.on_disk("state"), dir);
  EXPECT_TRUE(reloaded->get("earlier"));
  EXPECT_TRUE(reloaded->get("later")) << "a change after a failed compaction was not saved";
}

}  // namespace
