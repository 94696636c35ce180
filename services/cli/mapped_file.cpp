#include "cli/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "common/arguments.hpp"
#include "memwire/error.hpp"

namespace memwire::cli {
namespace {

Error system_error(const std::string& what, const std::string& path) {
  return Error(ErrorCode::InvalidArgument, what + " " + path + ": " + std::strerror(errno));
}

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string random_suffix() {
  std::random_device random;
  char text[17];
  std::snprintf(text, sizeof text, "%08x%08x", random(), random());
  return text;
}

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

FileHandle::FileHandle(FileHandle&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}
FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

Mapping::Mapping(Mapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}
Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}
Mapping::~Mapping() { reset(); }
void Mapping::reset() noexcept {
  if (base_) ::munmap(std::exchange(base_, nullptr), std::exchange(size_, 0));
}

InputFile::InputFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  FileHandle file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0) throw system_error("cannot open", path);
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) throw system_error("cannot inspect", path);
  if (!S_ISREG(status.st_mode))
    throw Error(ErrorCode::InvalidArgument,
                path + " is " + kind_of(status.st_mode) + ": memwire serves regular files");
  if (status.st_size == 0)
    throw Error(ErrorCode::InvalidArgument, path + " is empty: nothing to serve");
  const auto size = static_cast<std::size_t>(status.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.get(), 0);
  if (base == MAP_FAILED) throw system_error("cannot map", path);
  mapping_ = Mapping(base, size);
}

void OutputFile::check_target(const std::string& path) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) {
    if (errno == ENOENT) return;  // created by commit()
    throw system_error("cannot inspect", path);
  }
  if (!S_ISREG(status.st_mode)) {
    throw services::UsageError(path + " is " + kind_of(status.st_mode) +
                               ": memwire get writes only regular files (it replaces OUT "
                               "whole, and will not follow or replace anything else)");
  }
}

OutputFile::OutputFile(std::string path, std::uint64_t size) : path_(std::move(path)) {
  if (size == 0) throw Error(ErrorCode::InvalidArgument, "nothing to write to " + path_);
  check_target(path_);
  // A fresh name each time, never one that exists: O_EXCL refuses existing files and links.
  constexpr int kAttempts = 16;
  for (int attempt = 0; attempt < kAttempts && file_.get() < 0; ++attempt) {
    temp_path_ = path_ + "." + random_suffix() + ".part";
    file_ = FileHandle(
        ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
    if (file_.get() < 0 && errno != EEXIST) throw system_error("cannot create", temp_path_);
  }
  if (file_.get() < 0) throw system_error("cannot create", temp_path_);
  try {
    struct statvfs space {};
    if (::fstatvfs(file_.get(), &space) == 0 &&
        size > static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize) {
      throw Error(ErrorCode::InvalidArgument,
                  "not enough space for " + path_ + ": it needs " + std::to_string(size) +
                      " bytes, " +
                      std::to_string(static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize) +
                      " are free");
    }
    if (size > static_cast<std::uint64_t>(SIZE_MAX / 2))
      throw Error(ErrorCode::InvalidArgument, "cannot map " + std::to_string(size) + " bytes");
    // Reserved, not just sized: a full disk would otherwise kill us (SIGBUS) mid-transfer.
    int reserved = ::posix_fallocate(file_.get(), 0, static_cast<off_t>(size));
    if (reserved == EOPNOTSUPP || reserved == EINVAL) {
      if (::ftruncate(file_.get(), static_cast<off_t>(size)) != 0)
        throw system_error("cannot size", temp_path_);
    } else if (reserved != 0) {
      errno = reserved;
      throw system_error("cannot reserve space for", temp_path_);
    }
    void* base = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED,
                        file_.get(), 0);
    if (base == MAP_FAILED) throw system_error("cannot map", temp_path_);
    mapping_ = Mapping(base, static_cast<std::size_t>(size));
    // No readahead: a page in memory is then a page written, which is what progress counts.
    ::madvise(base, static_cast<std::size_t>(size), MADV_RANDOM);
    countable_ = true;
    countable_ = bytes_written().value_or(1) == 0;
  } catch (...) {
    ::unlink(temp_path_.c_str());
    throw;
  }
}

OutputFile::~OutputFile() {
  mapping_.reset();
  if (!committed_) ::unlink(temp_path_.c_str());
}

std::optional<std::uint64_t> OutputFile::bytes_written() const {
  if (!countable_) return std::nullopt;
  const auto page = page_size();
  residency_.resize((mapping_.size() + page - 1) / page);
  if (::mincore(mapping_.data(), mapping_.size(), residency_.data()) != 0) return std::nullopt;
  std::uint64_t pages = 0;
  for (auto resident : residency_) pages += resident & 1;
  return std::min<std::uint64_t>(pages * page, mapping_.size());
}

void OutputFile::commit() {
  mapping_.reset();
  // Checked again: OUT may have changed while the bytes arrived.
  check_target(path_);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw system_error("cannot rename " + temp_path_ + " to", path_);
  committed_ = true;
}

}  // namespace memwire::cli
