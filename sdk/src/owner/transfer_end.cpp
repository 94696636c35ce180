#include "owner/transfer_end.hpp"

namespace memwire::detail {

std::optional<Error> end_admitted_transfer(PoolState& pool, const PoolState::Peer& peer,
                                           const std::string& tag, OperationKind kind,
                                           const std::shared_ptr<RequestGrant>& grant,
                                           std::optional<Error> failure) {
  if (tag.empty()) return failure;
  if (!failure) {
    try {
      const auto deliver = [&] { pool.deliver(peer, tag, kind); };
      if (!grant) {
        deliver();
        return std::nullopt;
      }
      // Released under it: the release ended its waits already.
      return grant->finish({tag, kind}, deliver);
    } catch (const Error& error) {
      failure = error;
    }
  }
  if (!grant || grant->closed({tag, kind})) pool.fail(peer, tag, *failure, kind);
  return failure;
}

}  // namespace memwire::detail
