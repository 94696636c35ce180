#include "nkey_signer.hpp"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>

namespace memwire::sideband::nats_detail {
namespace {

constexpr std::size_t kMostSeedFileBytes = 64 << 10;

// nats.c frees the error text with free().
natsStatus refuse(char** error_text, const std::string& why) {
  *error_text = strdup(why.c_str());
  return NATS_ERR;
}

bool is_seed(std::string_view line) {
  // A user seed: "SU" then base32 (A-Z, 2-7), 58 characters in all.
  if (line.size() != 58 || !line.starts_with("SU")) return false;
  for (char c : line) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7'))) return false;
  }
  return true;
}

// The seed's line in `text`: the file holds the seed alone or in a .creds file's layout.
std::string_view find_seed(std::string_view text) {
  while (!text.empty()) {
    auto end = text.find('\n');
    auto line = text.substr(0, end);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (is_seed(line)) return line;
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return {};
}

}  // namespace

natsStatus NkeySigner::sign(char** error_text, unsigned char** signature, int* signature_length,
                            const char* nonce, void* closure) {
  return static_cast<NkeySigner*>(closure)->sign(error_text, signature, signature_length, nonce);
}

natsStatus NkeySigner::sign(char** error_text, unsigned char** signature, int* signature_length,
                            const char* nonce) {
  std::ifstream file(seed_file_, std::ios::binary);
  if (!file) return refuse(error_text, "cannot read the NKey seed file " + seed_file_);
  // A seed is 58 characters, a .creds file a few KiB: read no more than kMostSeedFileBytes.
  std::string text(kMostSeedFileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(file.gcount()));
  if (text.size() > kMostSeedFileBytes) {
    explicit_bzero(text.data(), text.size());
    return refuse(error_text, "the NKey seed file " + seed_file_ + " is over " +
                                  std::to_string(kMostSeedFileBytes) + " bytes");
  }
  std::string seed(find_seed(text));
  explicit_bzero(text.data(), text.size());
  if (seed.empty()) return refuse(error_text, "no NKey user seed (SU...) in " + seed_file_);

  auto status = nats_Sign(seed.c_str(), nonce, signature, signature_length);
  explicit_bzero(seed.data(), seed.size());
  if (status != NATS_OK) {
    return refuse(error_text, "signing the server's nonce with the seed of " + seed_file_ +
                                  " failed: " + natsStatus_GetText(status));
  }
  if (*signature_length > 0 && (*signature)[0] == 0) {
    std::free(*signature);
    *signature = nullptr;
    *signature_length = 0;
    refused_signature_ = true;
    return refuse(error_text,
                  "the nonce's signature begins with a zero byte, which nats.c 3.4 would send "
                  "empty; connect again for a new nonce");
  }
  return NATS_OK;
}

}  // namespace memwire::sideband::nats_detail
