#include "common/token_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/arguments.hpp"

namespace memwire::services {
namespace {

constexpr std::size_t kMaxTokenFile = 64 * 1024;

}  // namespace

std::string read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read --token-file " + path + ": " + std::strerror(errno));
  std::string token;
  // One byte past the limit tells "too large" from "exactly at the limit".
  token.resize(kMaxTokenFile + 1);
  in.read(token.data(), static_cast<std::streamsize>(token.size()));
  if (in.bad()) throw UsageError("cannot read --token-file " + path);
  token.resize(static_cast<std::size_t>(in.gcount()));
  if (token.size() > kMaxTokenFile)
    throw UsageError("--token-file " + path + " is larger than 64 KiB: not a token");
  if (token.empty()) throw UsageError("--token-file " + path + " is empty");
  if (token.ends_with("\r\n")) {
    token.resize(token.size() - 2);
  } else if (token.ends_with('\n')) {
    token.pop_back();
  }
  if (token.empty()) throw UsageError("--token-file " + path + " holds an empty token");
  for (std::size_t i = 0; i < token.size(); ++i) {
    auto byte = static_cast<unsigned char>(token[i]);
    if (byte < 0x20 || byte == 0x7f) {
      throw UsageError("--token-file " + path + ": the token holds a control character (byte " +
                       std::to_string(byte) + " at offset " + std::to_string(i) + ")");
    }
  }
  return token;
}

}  // namespace memwire::services
