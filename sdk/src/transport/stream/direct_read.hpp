#pragma once

#include "core/active_transfer.hpp"
#include "transport/stream/same_host.hpp"
#include "transport/stream/stream_active_side.hpp"

namespace memwire::detail {

// A pool READ that the owner lets us do ourselves (kDirectReads, shm): read on the calling
// thread with one process_vm_readv, no request, no answer, no thread of either side woken.
// Only what the owner need not vouch for: untagged (no tag follows it), not under a request
// grant (the owner admits and fences those), into host memory, every segment inside the
// owner's spans (else its refusal says what is wrong). True when the transfer was read and
// succeeded; false: send it to the owner as usual (a refusal of the kernel's also stops direct
// reads on `connection`).
bool read_directly(ActiveTransfer& transfer, OutboundConnection& connection, SameHost& same_host);

}  // namespace memwire::detail
