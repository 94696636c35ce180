#include "http/server/token_owner.hpp"

#include <openssl/evp.h>

#include "memwire/error.hpp"

namespace memwire::sideband::http {

std::string owner_of_token(const std::string& token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(token.data(), token.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw Error(ErrorCode::Transport, "cannot compute SHA-256");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string owner = "sha256:";
  for (unsigned int i = 0; i < 16 && i < length; ++i) {
    owner += kHex[digest[i] >> 4];
    owner += kHex[digest[i] & 0xf];
  }
  return owner;
}

}  // namespace memwire::sideband::http
