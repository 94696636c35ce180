#include "memwire/shared_buffer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "memwire/error.hpp"
#include "transport/shm/shared_memory_index.hpp"

namespace memwire {
namespace detail {
namespace {

// What peers were handed of a buffer so far. The first hand-out decides, for good: the seals
// it adds cannot be taken back (F_SEAL_SEAL).
enum class Sharing {
  None,
  // Sealed F_SEAL_FUTURE_WRITE: no descriptor of it (a peer's reopen of its read-only one
  // included) maps it writable or writes it; the owner's mapping, made before, still writes.
  ReadOnly,
  // Peers may write it: handed writable, or read for a registration peers may write anyway.
  Writable,
};

struct IndexEntry {
  std::size_t size;
  int fd;
  std::uint64_t buffer;
  Sharing sharing = Sharing::None;
};

struct SharedIndex {
  std::shared_mutex mutex;
  std::map<const std::byte*, IndexEntry, std::greater<>> by_begin;  // highest address first
};

SharedIndex& shared_index() {
  static SharedIndex index;
  return index;
}

}  // namespace

void index_shared_buffer(const std::byte* begin, std::size_t size, int fd, std::uint64_t buffer) {
  auto& index = shared_index();
  std::unique_lock lock(index.mutex);
  index.by_begin[begin] = {size, fd, buffer};
}

void unindex_shared_buffer(const std::byte* begin) noexcept {
  auto& index = shared_index();
  std::unique_lock lock(index.mutex);
  index.by_begin.erase(begin);
}

std::optional<SharedLocation> find_shared(const std::byte* data, std::size_t length) {
  auto& index = shared_index();
  std::shared_lock lock(index.mutex);
  auto it = index.by_begin.lower_bound(data);  // the last buffer starting at or before data
  if (it == index.by_begin.end()) return std::nullopt;
  const auto offset = static_cast<std::size_t>(data - it->first);
  const auto& entry = it->second;
  if (offset > entry.size || length > entry.size - offset) return std::nullopt;
  return SharedLocation{entry.buffer, entry.size, offset, length};
}

bool shared_buffer_live(std::uint64_t buffer) {
  auto& index = shared_index();
  std::shared_lock lock(index.mutex);
  return std::any_of(index.by_begin.begin(), index.by_begin.end(),
                     [&](const auto& entry) { return entry.second.buffer == buffer; });
}

FileDescriptor share_shared_buffer(std::uint64_t buffer, bool writable, bool peers_may_write) {
  auto& index = shared_index();
  // Under the lock: the buffer cannot close (and its descriptor number be reused) meanwhile,
  // and two connections cannot seal it two ways at once.
  std::unique_lock lock(index.mutex);
  for (auto& [begin, entry] : index.by_begin) {
    if (entry.buffer != buffer) continue;
    const auto wanted = writable || peers_may_write ? Sharing::Writable : Sharing::ReadOnly;
    if (entry.sharing == Sharing::None) {
      const int seals =
          wanted == Sharing::ReadOnly ? F_SEAL_FUTURE_WRITE | F_SEAL_SEAL : F_SEAL_SEAL;
      if (::fcntl(entry.fd, F_ADD_SEALS, seals) != 0) return {};
      entry.sharing = wanted;
    }
    // Sealed read-only: no peer can map it writable. Writable: a read-only descriptor could be
    // reopened writable through /proc, so only a peer that may write anyway gets one.
    if (writable && entry.sharing == Sharing::ReadOnly) return {};
    if (!peers_may_write && entry.sharing == Sharing::Writable) return {};
    if (writable) return FileDescriptor(::fcntl(entry.fd, F_DUPFD_CLOEXEC, 0));
    // A new open file description, read-only: mmap(PROT_WRITE, MAP_SHARED) through it fails.
    // Our own descriptor, by our own /proc entry: nobody else names it.
    const auto path = "/proc/self/fd/" + std::to_string(entry.fd);
    return FileDescriptor(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  }
  return {};
}

}  // namespace detail

SharedBuffer::SharedBuffer(std::size_t size) : size_(size) {
  if (size == 0) throw Error(ErrorCode::InvalidArgument, "a SharedBuffer needs a size above 0");
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapped_ = (size + page - 1) / page * page;
  // Sealed at its size: a peer that maps it may rely on it never shrinking under its mapping
  // (which would fault), and checks the seals before it maps (peer_mappings.cpp). F_SEAL_SEAL
  // comes with the first hand-out (share_shared_buffer), which decides whether peers may write.
  fd_ = ::memfd_create("memwire-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* mapping = MAP_FAILED;
  std::string failed;
  if (fd_ < 0) {
    failed = "memfd_create";
  } else if (::ftruncate(fd_, static_cast<off_t>(mapped_)) != 0) {
    failed = "ftruncate";
  } else if (::fchmod(fd_, 0600) != 0) {
    failed = "fchmod";
  } else if (::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    failed = "sealing";
  } else if ((mapping = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0)) ==
             MAP_FAILED) {
    failed = "mmap";
  }
  if (!failed.empty()) {
    const std::string reason = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw Error(ErrorCode::Transport, "SharedBuffer of " + std::to_string(size) +
                                          " bytes: " + failed + " failed: " + reason);
  }
  data_ = static_cast<std::byte*>(mapping);
  static std::atomic<std::uint64_t> next_buffer{1};
  detail::index_shared_buffer(data_, mapped_, fd_, next_buffer.fetch_add(1));
}

SharedBuffer::~SharedBuffer() { close(); }

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    close();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void SharedBuffer::close() noexcept {
  if (data_ == nullptr) return;
  // Mode 0 tells peers that hold the memfd it is released (they let go of it on their next new
  // buffer: peer_mappings.cpp), before the index forgets it (then the owner may give them
  // another in its place). Its pages go now, not when the last peer lets go, unless peers were
  // handed it read-only: F_SEAL_FUTURE_WRITE refuses the punch too, and they go with the last
  // descriptor.
  [[maybe_unused]] auto released = ::fchmod(fd_, 0);
  detail::unindex_shared_buffer(data_);
  ::munmap(data_, mapped_);
  [[maybe_unused]] auto freed =
      ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(mapped_));
  ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
  fd_ = -1;
}

}  // namespace memwire
