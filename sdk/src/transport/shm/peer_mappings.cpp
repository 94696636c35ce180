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

namespace memwire::detail {
namespace {

// The seals a peer's buffer must carry: it cannot shrink under our mapping (a fault here) nor
// grow, and no seal can be added or taken later. Only a memfd made with MFD_ALLOW_SEALING can
// carry them (any other file's F_GET_SEALS fails, or shows F_SEAL_SEAL alone).
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

Error refused(const std::string& what) {
  return Error(ErrorCode::Protocol, "the owner's shared buffer is refused: " + what);
}

}  // namespace

PeerMapping::~PeerMapping() { ::munmap(base_, size_); }

std::optional<std::string> shared_descriptor_problem(int descriptor, std::uint64_t size,
                                                     bool writable) {
  struct stat status {};
  if (::fstat(descriptor, &status) != 0) return std::string("fstat: ") + std::strerror(errno);
  if (!S_ISREG(status.st_mode)) return "not a regular file";
  const int seals = ::fcntl(descriptor, F_GET_SEALS);
  if (seals < 0) return "not a memfd (no seals)";
  if ((seals & kRequiredSeals) != kRequiredSeals)
    return "a memfd not sealed against shrinking, growing and new seals (seals " +
           std::to_string(seals) + ")";
  if (status.st_size < 0 || static_cast<std::uint64_t>(status.st_size) != size)
    return "its size is " + std::to_string(status.st_size) + " bytes, the answer said " +
           std::to_string(size);
  const int mode = ::fcntl(descriptor, F_GETFL);
  if (mode < 0) return std::string("F_GETFL: ") + std::strerror(errno);
  if (writable && (mode & O_ACCMODE) != O_RDWR) return "opened read-only, for a write";
  return std::nullopt;
}

void PeerMappings::forget_released() {
  // The owner sets a buffer's mode to 0 as it closes it (shared_buffer.cpp): a mode only our
  // own reading of our own descriptor tells, no name of the owner's.
  std::erase_if(buffers_, [&](const auto& held) {
    struct stat status {};
    if (::fstat(held.second.descriptor.get(), &status) == 0 && (status.st_mode & 07777) != 0)
      return false;
    std::erase_if(entries_, [&](const auto& entry) {
      return std::get<0>(entry.first) == held.first.first &&
             std::get<3>(entry.first) == held.first.second;
    });
    return true;
  });
}

void PeerMappings::adopt(std::uint64_t buffer, std::uint64_t file_size, bool writable,
                         FileDescriptor descriptor) {
  forget_released();
  if (buffers_.contains({buffer, writable}))
    throw refused("buffer " + std::to_string(buffer) + " was sent twice");
  if (buffers_.size() >= kMaxSharedPerConnection)
    throw refused("more than " + std::to_string(kMaxSharedPerConnection) +
                  " buffers on one connection");
  if (auto problem = shared_descriptor_problem(descriptor.get(), file_size, writable))
    throw refused(*problem);
  buffers_[{buffer, writable}] = {std::move(descriptor), file_size};
}

std::shared_ptr<const PeerMapping> PeerMappings::map(const SharedSpan& span, bool writable) {
  const Key key{span.buffer, span.offset, span.length, writable};
  if (auto found = entries_.find(key); found != entries_.end()) {
    found->second.last_use = ++uses_;
    return found->second.mapping;
  }
  const auto held = buffers_.find({span.buffer, writable});
  if (held == buffers_.end())
    throw refused("it names buffer " + std::to_string(span.buffer) +
                  ", which it never sent on this connection");
  const auto& buffer = held->second;
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  if (span.file_size != buffer.size || span.length == 0 || span.offset % page != 0 ||
      span.offset > buffer.size || span.length > buffer.size - span.offset)
    throw refused("a span outside the buffer, or not on a page");
  while (entries_.size() >= kMaxMappings)
    entries_.erase(std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
      return a.second.last_use < b.second.last_use;
    }));
  const int protection = PROT_READ | (writable ? PROT_WRITE : 0);
  void* base = ::mmap(nullptr, span.length, protection, MAP_SHARED, buffer.descriptor.get(),
                      static_cast<off_t>(span.offset));
  if (base == MAP_FAILED)
    throw Error(ErrorCode::Transport,
                std::string("cannot map the owner's shared buffer: ") + std::strerror(errno));
  auto mapping = std::make_shared<const PeerMapping>(static_cast<std::byte*>(base), span.length);
  entries_[key] = {mapping, ++uses_};
  return mapping;
}

}  // namespace memwire::detail
