// A peer handed a SharedBuffer read-only (a pool that forbids remote writes) cannot write it
// through the descriptor it holds, whatever it tries, before or after the pool closes: the
// kernel refuses (F_SEAL_FUTURE_WRITE), not only the mode of the memfd, which a peer of the
// same user or root gets past (issue 51: such a peer reopened /proc/self/fd/N read-write and
// wrote blocks). The owner is another process (tests/support/test_peer.cpp); this process is
// the peer, and tries.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/pattern.hpp"
#include "support/test_peer_process.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = 4096;
constexpr std::size_t kBlocks = 256;
constexpr std::uint64_t kSeed = 51;

ConnectorOptions shm_only() {
  ConnectorOptions options;
  options.transports = {"shm"};
  return options;
}

// An owner process with a pool in a SharedBuffer, of the pattern of kSeed.
struct PoolOwner {
  explicit PoolOwner(bool remote_write)
      : child(start_test_peer(
            {"publish", "pool", std::to_string(kBlock * kBlocks), std::to_string(kSeed)},
            {"MEMWIRE_TRANSPORTS=shm", "MEMWIRE_PEER_SHARED=1",
             std::string("MEMWIRE_PEER_POOL_READ_ONLY=") + (remote_write ? "0" : "1")})),
        metadata(PoolMetadata::from_json(expect_line(child))) {}
  ~PoolOwner() {
    child.write_line("quit");
    child.wait(10s);
  }
  std::string say(const std::string& line) {
    child.write_line(line);
    return expect_line(child, 10s);
  }
  ChildProcess child;
  PoolMetadata metadata;
};

// The memfds of SharedBuffers this process holds (its connector took them from the owner).
std::vector<int> held_shared_buffers() {
  std::vector<int> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.find("memfd:memwire-shared") != std::string::npos)
      found.push_back(std::stoi(entry.path().filename().string()));
  }
  return found;
}

// Every way to write the memfd behind `held` that this process tries, and what each got: ""
// when refused with EPERM or EACCES, else what went through.
std::vector<std::string> writes_that_got_through(int held) {
  std::vector<std::string> through;
  const auto refused = [&](bool failed, const char* what) {
    if (!failed)
      through.push_back(std::string(what) + " succeeded");
    else if (errno != EPERM && errno != EACCES)
      through.push_back(std::string(what) + " failed with " + std::strerror(errno));
  };
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // Reopened read-write through our own /proc entry (root, or the owner's user, may).
  const auto path = "/proc/self/fd/" + std::to_string(held);
  const int reopened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (reopened >= 0) {
    void* mapping = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0);
    refused(mapping == MAP_FAILED, "mmap(PROT_WRITE, MAP_SHARED) of the reopened descriptor");
    if (mapping != MAP_FAILED) {
      static_cast<char*>(mapping)[0] = 'X';
      ::munmap(mapping, page);
    }
    refused(::write(reopened, "X", 1) < 0, "write() to the reopened descriptor");
    refused(::pwrite(reopened, "X", 1, static_cast<off_t>(page)) < 0, "pwrite()");
    refused(::fallocate(reopened, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                        static_cast<off_t>(page)) != 0,
            "fallocate(PUNCH_HOLE) (zeroes the owner's bytes)");
    void* readable = ::mmap(nullptr, page, PROT_READ, MAP_SHARED, reopened, 0);
    if (readable != MAP_FAILED) {
      refused(::mprotect(readable, page, PROT_READ | PROT_WRITE) != 0,
              "mprotect(PROT_WRITE) of a read-only mapping of the reopened descriptor");
      ::munmap(readable, page);
    }
    ::close(reopened);
  } else if (errno != EACCES && errno != EPERM) {
    through.push_back(std::string("reopen failed with ") + std::strerror(errno));
  }
  // The descriptor as held: its access mode cannot be changed, its seals not undone.
  (void)::fcntl(held, F_SETFL, O_RDWR);
  if ((::fcntl(held, F_GETFL) & O_ACCMODE) != O_RDONLY)
    through.push_back("F_SETFL made the descriptor writable");
  refused(::fcntl(held, F_ADD_SEALS, F_SEAL_WRITE) != 0, "F_ADD_SEALS");
  void* readable = ::mmap(nullptr, page, PROT_READ, MAP_SHARED, held, 0);
  if (readable == MAP_FAILED) {
    through.push_back(std::string("cannot even map it to read: ") + std::strerror(errno));
  } else {
    refused(::mprotect(readable, page, PROT_READ | PROT_WRITE) != 0,
            "mprotect(PROT_WRITE) of a read-only mapping");
    ::munmap(readable, page);
  }
  return through;
}

// Reads blocks of `remote` into a pool of this process; the bytes checked against `seed`.
void read_blocks(Connector& connector, const PoolMetadata& remote, std::uint64_t seed) {
  std::vector<std::byte> memory(kBlock * 64);
  auto pool = connector.register_pool({{memory.data(), kBlock, 0, 64, {}}});
  std::vector<BlockPair> pairs;
  for (std::uint64_t i = 0; i < 64; ++i) pairs.push_back({i * 3 % kBlocks, i});
  auto transfer = connector.read_blocks(remote, pairs, pool);
  ASSERT_EQ(transfer.wait_for_completion(10s), OperationStatus::Complete);
  for (std::size_t i = 0; i < pairs.size(); ++i)
    ASSERT_EQ(memory[i * kBlock + 7], pattern_byte(seed, pairs[i].remote * kBlock + 7))
        << "block " << pairs[i].remote;
}

TEST(ReadOnlySharing, APeerHandedAReadOnlyPoolCannotWriteItBeforeOrAfterItCloses) {
  PoolOwner owner(/*remote_write=*/false);
  Connector reader(shm_only());
  const auto before = held_shared_buffers();
  read_blocks(reader, owner.metadata, kSeed);
  std::vector<int> handed;
  for (int fd : held_shared_buffers())
    if (std::find(before.begin(), before.end(), fd) == before.end()) handed.push_back(fd);
  ASSERT_EQ(handed.size(), 1u) << "the owner did not hand its buffer over: nothing is tested";
  EXPECT_EQ(::fcntl(handed[0], F_GETFL) & O_ACCMODE, O_RDONLY);

  EXPECT_EQ(writes_that_got_through(handed[0]), std::vector<std::string>{});
  EXPECT_EQ(owner.say("verify"), "intact");
  // The owner's own mapping still writes, and the peer reads what it wrote.
  EXPECT_EQ(owner.say("fill 77"), "filled");
  read_blocks(reader, owner.metadata, 77);

  EXPECT_EQ(owner.say("close"), "closed");
  EXPECT_EQ(writes_that_got_through(handed[0]), std::vector<std::string>{});
  EXPECT_EQ(owner.say("verify"), "intact");
}

// A pool that lets peers write keeps its buffer writable for them: a write lands through the
// peer's own mapping, and a read is mapped too.
TEST(ReadOnlySharing, APoolThatAllowsWritesIsStillWrittenThroughTheMapping) {
  PoolOwner owner(/*remote_write=*/true);
  Connector peer(shm_only());
  read_blocks(peer, owner.metadata, kSeed);
  std::vector<std::byte> memory(kBlock * 64);
  fill_pattern(memory, 78);
  auto pool = peer.register_pool({{memory.data(), kBlock, 0, 64, {}}});
  std::vector<BlockPair> pairs;
  for (std::uint64_t i = 0; i < 64; ++i) pairs.push_back({i, i});  // blocks 0..63 <- ours
  auto transfer = peer.write_blocks(pool, pairs, owner.metadata);
  ASSERT_EQ(transfer.wait_for_completion(10s), OperationStatus::Complete);
  // Blocks 0..63 now hold our pattern of 78 (the same offsets: block i here is block i there).
  const auto verdict = owner.say("verify");
  EXPECT_EQ(verdict, "changed at 0") << "the write did not land";
  int writable = 0;
  for (int fd : held_shared_buffers())
    if ((::fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR) ++writable;
  EXPECT_EQ(writable, 1) << "the write went another way than the peer's mapping";
}

}  // namespace
