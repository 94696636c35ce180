#include "owner/transfer_claim.hpp"

#include <string>

#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "memwire/error.hpp"
#include "pool/pool_state.hpp"

namespace memwire::detail {

std::shared_ptr<Registration> claimed_registration(const RegistrationTable& registrations,
                                                   const TransferClaim& claim) {
  auto registration = registrations.find(claim.key);
  if (!registration) {
    if (claim.pool)
      throw Error(ErrorCode::Expired,
                  "stale pool metadata (generation " + std::to_string(claim.generation) +
                      "): the owner has no such pool any more (dropped, re-registered, or its "
                      "connector restarted); fetch the pool's metadata again");
    throw Error(ErrorCode::NotFound,
                "no live operation with that notification key (completed, cancelled or never "
                "offered)");
  }
  const auto* pool = registration->pool().get();
  if (claim.pool != (pool != nullptr))
    throw Error(ErrorCode::AccessDenied, claim.pool
                                             ? "a one-shot operation is no pool"
                                             : "a pool's blocks move only in pool transfers");
  if (pool != nullptr) {
    const std::uint64_t mask = claim.generation_bits >= 64
                                   ? ~std::uint64_t{0}
                                   : (std::uint64_t{1} << claim.generation_bits) - 1;
    const auto generation = static_cast<std::uint64_t>(pool->generation());
    if (claim.generation != (generation & mask))
      throw Error(ErrorCode::Expired, "stale pool metadata: generation " +
                                          std::to_string(claim.generation) + ", the pool's is " +
                                          std::to_string(generation));
  }
  return registration;
}

}  // namespace memwire::detail
