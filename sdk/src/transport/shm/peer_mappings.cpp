#include "transport/shm/peer_mappings.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "memwire/error.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {
namespace {

std::string fd_path(int pid, std::uint64_t fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

}  // namespace

PeerMapping::~PeerMapping() { ::munmap(base_, size_); }

bool PeerMappings::still_held_by_peer(std::uint64_t fd, std::uint64_t inode) const {
  struct stat status {};
  return ::stat(fd_path(peer_process_, fd).c_str(), &status) == 0 && status.st_ino == inode;
}

void PeerMappings::forget_released() {
  std::erase_if(entries_, [&](const auto& entry) {
    return !still_held_by_peer(entry.second.fd, std::get<0>(entry.first));
  });
  while (entries_.size() >= kMaxMappings)
    entries_.erase(std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
      return a.second.last_use < b.second.last_use;
    }));
}

std::shared_ptr<const PeerMapping> PeerMappings::map(const SharedSpan& span, bool writable) {
  const Key key{span.inode, span.offset, span.length, writable};
  if (auto found = entries_.find(key); found != entries_.end() && found->second.fd == span.fd) {
    found->second.last_use = ++uses_;
    return found->second.mapping;
  }
  forget_released();
  const auto path = fd_path(peer_process_, span.fd);
  auto fail = [&](const char* what) {
    return Error(ErrorCode::Transport, std::string("cannot map the peer's shared buffer (") + what +
                                           " " + path + "): " + std::strerror(errno));
  };
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  if (span.length == 0 || span.offset % page != 0 || span.offset > UINT64_MAX - span.length) {
    errno = EINVAL;
    throw fail("span");
  }
  // O_NONBLOCK: a descriptor that names a FIFO must not block this reader thread in open().
  FileDescriptor file(
      ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!file) throw fail("open");
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) throw fail("fstat");
  if (!S_ISREG(status.st_mode) || status.st_ino != span.inode ||
      static_cast<std::uint64_t>(status.st_size) < span.offset + span.length) {
    errno = ESTALE;
    throw fail("check");
  }
  const int protection = PROT_READ | (writable ? PROT_WRITE : 0);
  void* base = ::mmap(nullptr, span.length, protection, MAP_SHARED, file.get(),
                      static_cast<off_t>(span.offset));
  if (base == MAP_FAILED) throw fail("mmap");
  auto mapping = std::make_shared<const PeerMapping>(static_cast<std::byte*>(base), span.length);
  entries_[key] = {mapping, span.fd, ++uses_};
  return mapping;
}

}  // namespace memwire::detail
