#pragma once

#include <optional>
#include <vector>

#include "core/transfer_request.hpp"
#include "memwire/pool.hpp"

namespace memwire::detail {

class PoolState;

// A transfer's block pairs as runs of bytes: each pair's blocks (or the slice of them) checked
// against both pools' geometry, then runs that are consecutive here and there joined into one.
// Throws before anything moves: InvalidArgument (a block past a pool's end, an empty or
// overflowing slice, offsets without a slice), SizeMismatch (blocks of different sizes without
// a slice, or a slice that does not fit a block). The plan's tag, generation and local pool are
// the caller's to set.
TransferRequest plan_blocks(const std::vector<BlockPair>& pairs, const PoolMetadata& remote,
                            const PoolState& local, const std::optional<BlockSlice>& slice);

}  // namespace memwire::detail
