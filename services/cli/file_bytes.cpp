#include "cli/file_bytes.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "memwire/error.hpp"

namespace memwire::cli {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorCode::InvalidArgument, "cannot open " + path + ": " + std::strerror(errno));
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(ErrorCode::InvalidArgument, "cannot size " + path + ": " + ec.message());
  std::vector<std::byte> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) throw Error(ErrorCode::InvalidArgument, "cannot read " + path);
  return bytes;
}

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  // Write aside and rename: OUT is either complete or untouched.
  auto temp = path + ".part";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error(ErrorCode::InvalidArgument,
                  "cannot create " + temp + ": " + std::strerror(errno));
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error(ErrorCode::InvalidArgument, "cannot write " + temp);
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec)
    throw Error(ErrorCode::InvalidArgument,
                "cannot rename " + temp + " to " + path + ": " + ec.message());
}

}  // namespace memwire::cli
