#pragma once

#include <filesystem>
#include <string>

namespace memwire::test_support {

// A fresh folder of its own under the system's temporary folder (mkdtemp: never one that
// another test or process also uses), removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "memwire-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  // The path of `name` inside it (nothing is created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace memwire::test_support
