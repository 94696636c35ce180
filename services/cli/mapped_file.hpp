#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memwire::cli {

// Owns a file descriptor.
class FileHandle {
 public:
  FileHandle() = default;
  explicit FileHandle(int fd) : fd_(fd) {}
  FileHandle(FileHandle&& other) noexcept;
  FileHandle& operator=(FileHandle&& other) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle();
  int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

// Owns a memory mapping.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t size) : base_(base), size_(size) {}
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  std::byte* data() const noexcept { return static_cast<std::byte*>(base_); }
  std::size_t size() const noexcept { return size_; }
  void reset() noexcept;

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

// FILE's bytes mapped read-only for `memwire serve`: the page cache is the only copy, so a
// large file costs no anonymous memory. Refuses anything but a non-empty regular file.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  std::byte* data() const noexcept { return mapping_.data(); }
  std::size_t size() const noexcept { return mapping_.size(); }

 private:
  Mapping mapping_;
};

// What `memwire get` writes: OUT must be a regular file or absent (symbolic links, folders,
// FIFOs, sockets and devices are refused before anything is transferred). The bytes land in a
// fresh temporary file beside OUT ("OUT.<random>.part", created O_EXCL|O_NOFOLLOW: an existing
// file or link there is never followed nor reused), with its space reserved and mapped;
// commit() renames it over OUT. Until then OUT is untouched, and the temporary file is removed
// on every failure.
class OutputFile {
 public:
  // Throws services::UsageError when OUT exists and is not a regular file.
  static void check_target(const std::string& path);

  OutputFile(std::string path, std::uint64_t size);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::byte* data() const noexcept { return mapping_.data(); }
  std::uint64_t size() const noexcept { return mapping_.size(); }
  const std::string& temp_path() const noexcept { return temp_path_; }
  // Bytes written so far, counted as the file's pages now in memory; nullopt when that cannot
  // tell (the file system keeps reserved space in memory, as tmpfs does).
  std::optional<std::uint64_t> bytes_written() const;
  // Replaces OUT with the finished file.
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  FileHandle file_;
  Mapping mapping_;
  bool committed_ = false;
  bool countable_ = false;
  mutable std::vector<unsigned char> residency_;
};

}  // namespace memwire::cli
