#pragma once

#include <cstdint>

#include "memwire/error.hpp"
#include "transport/verbs/outbound_transfer.hpp"
#include "transport/verbs/verbs_wire.hpp"

namespace memwire::detail::verbs {

// The notices the active side sends about a transfer: one-shot or pool (verbs_wire.hpp).

// A leg's Begin: a pool transfer's PoolBegin carries its generation and tag; a one-shot
// operation's Begin its byte count and the transfer's name (the same on every rail).
Notice begin_notice(const OutboundTransfer& leg);
// A notice of `type` about `stripe`'s transfer on its leg `leg_seq`: key, token and kind.
Notice transfer_notice(NoticeType type, std::uint64_t leg_seq, const Stripe& stripe);
// The transfer failed: Abort with the reason, or a pool's PoolAbort naming its tag.
Notice abort_notice(std::uint64_t leg_seq, const Stripe& stripe, const Error& error);

}  // namespace memwire::detail::verbs
