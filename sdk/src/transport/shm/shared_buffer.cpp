#include "memwire/shared_buffer.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

struct IndexEntry {
  std::size_t size;
  int fd;
  std::uint64_t inode;
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

void index_shared_buffer(const std::byte* begin, std::size_t size, int fd, std::uint64_t inode) {
  auto& index = shared_index();
  std::unique_lock lock(index.mutex);
  index.by_begin[begin] = {size, fd, inode};
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
  return SharedLocation{static_cast<std::uint64_t>(entry.fd), entry.inode, offset, entry.size};
}

}  // namespace detail

SharedBuffer::SharedBuffer(std::size_t size) : size_(size) {
  if (size == 0) throw Error(ErrorCode::InvalidArgument, "a SharedBuffer needs a size above 0");
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapped_ = (size + page - 1) / page * page;
  fd_ = ::memfd_create("memwire-shared", MFD_CLOEXEC);
  struct stat status {};
  void* mapping = MAP_FAILED;
  std::string failed;
  if (fd_ < 0) {
    failed = "memfd_create";
  } else if (::ftruncate(fd_, static_cast<off_t>(mapped_)) != 0) {
    failed = "ftruncate";
  } else if (::fstat(fd_, &status) != 0) {
    failed = "fstat";
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
  detail::index_shared_buffer(data_, mapped_, fd_, status.st_ino);
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
  detail::unindex_shared_buffer(data_);
  ::munmap(data_, mapped_);
  ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
  fd_ = -1;
}

}  // namespace memwire
