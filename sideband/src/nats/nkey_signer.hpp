#pragma once

// Signs the server's nonce with the NKey seed of a file, read afresh at each (re)connect and
// wiped after use, in place of nats.c's own seed-file handler. nats.c 3.4.1 base64-encodes
// the signature as a C string, so a signature whose first byte is zero (1 nonce in 256) goes
// out empty and the server refuses the connect as if the key were wrong. This signer refuses
// such a signature itself, with that reason, and the connect is tried again with a new nonce.

#include <nats/nats.h>

#include <atomic>
#include <string>

namespace memwire::sideband::nats_detail {

class NkeySigner {
 public:
  explicit NkeySigner(std::string seed_file) : seed_file_(std::move(seed_file)) {}

  // A natsSignatureHandler; `closure` is the NkeySigner.
  static natsStatus sign(char** error_text, unsigned char** signature, int* signature_length,
                         const char* nonce, void* closure);

  // Whether a signature was refused for its zero first byte since the last call.
  bool take_refused_signature() noexcept { return refused_signature_.exchange(false); }

 private:
  natsStatus sign(char** error_text, unsigned char** signature, int* signature_length,
                  const char* nonce);

  std::string seed_file_;
  std::atomic<bool> refused_signature_{false};
};

}  // namespace memwire::sideband::nats_detail
