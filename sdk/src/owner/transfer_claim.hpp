#pragma once

#include <cstdint>
#include <memory>

#include "util/ids.hpp"

namespace memwire::detail {

class Registration;
class RegistrationTable;

// What a peer says of a transfer it begins, before any token is looked at: the registration's
// key, whether it is a pool transfer, and (a pool's) the generation of the metadata it holds, of
// which its transport's wire carries the low `generation_bits`.
struct TransferClaim {
  Id128 key;
  bool pool = false;
  std::uint64_t generation = 0;
  unsigned generation_bits = 64;
};

// The owner's first answer to every transfer, on every transport, written here once: the
// registration the claim names, a pool exactly when the claim says so, of the generation it
// says. Throws the Error to answer with: Expired for a pool dropped, re-registered or of another
// generation (the peer fetches its metadata again), NotFound for a one-shot operation that is
// gone, AccessDenied for a pool asked as an operation or the other way round.
std::shared_ptr<Registration> claimed_registration(const RegistrationTable& registrations,
                                                   const TransferClaim& claim);

}  // namespace memwire::detail
