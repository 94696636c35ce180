"""Block slices from Python (counterpart of pool_slice_conformance_test.cpp), over tcp and shm:
pools of different block sizes move exactly the sliced bytes of each pair and nothing else;
bad slices are refused before anything moves."""

import numpy as np
import pytest

import memwire

TRANSPORTS = ["tcp", "shm"]
B = 4096  # a full (TP 1) block


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


def connector(transport):
    return memwire.Connector(transports=[transport], environment=False)


def filled(blocks, block_size, seed):
    return np.random.default_rng(seed).integers(0, 256, blocks * block_size, dtype=np.uint8)


def view(memory, block_size, index):
    return memory[index * block_size:(index + 1) * block_size]


def test_tp2_to_1_gathers_each_ranks_half_of_every_block(transport):
    # decode TP 1 (blocks of B) reads each block's halves from two prefill TP 2 ranks (B / 2).
    decode, rank0, rank1 = connector(transport), connector(transport), connector(transport)
    mine = filled(16, B, 1)
    halves = [filled(16, B // 2, 2), filled(16, B // 2, 3)]
    expected = mine.copy()
    pairs = [(i, 15 - i) for i in range(8)] + [(9, 9), (10, 10)]
    with decode.register_pool((mine, B)) as local, rank0.register_pool((halves[0], B // 2)) as r0, \
            rank1.register_pool((halves[1], B // 2)) as r1:
        for k, remote in enumerate((r0, r1)):
            op = decode.read_blocks(remote.metadata, pairs, local, slice=(0, k * B // 2, B // 2))
            op.wait(10)
            for r, l in pairs:
                view(expected, B, l)[k * B // 2:(k + 1) * B // 2] = view(halves[k], B // 2, r)
        assert np.array_equal(mine, expected)


def test_tp1_to_2_writes_each_rank_its_half_tagged(transport):
    # prefill TP 1 (blocks of B) writes decode rank k the k-th half of each block.
    prefill, decode = connector(transport), connector(transport)
    source = filled(8, B, 4)
    ranks = [filled(8, B // 2, 5), filled(8, B // 2, 6)]
    expected = [r.copy() for r in ranks]
    pairs = np.array([[i, i] for i in range(8)])
    with prefill.register_pool((source, B)) as local:
        for k in range(2):
            with decode.register_pool((ranks[k], B // 2)) as remote:
                prefill.write_blocks(local, pairs, remote.metadata, tag=f"rank{k}",
                                     slice=(0, k * B // 2, B // 2)).wait(10)
                # the slice names the local (prefill) offset: bytes [k*B/2, +B/2) of each block
                n = remote.wait_for_tag(f"rank{k}", timeout=10)
                assert n.tag == f"rank{k}"
            for i in range(8):
                view(expected[k], B // 2, i)[:] = view(source, B, i)[k * B // 2:(k + 1) * B // 2]
            assert np.array_equal(ranks[k], expected[k])


def test_four_small_blocks_fill_one_large_block_at_pair_offsets(transport):
    # prefill blocks a quarter of decode's: the pair's own offsets place each small block.
    small, large = B // 4, B
    prefill, decode = connector(transport), connector(transport)
    source = filled(16, small, 7)
    there = filled(4, large, 8)
    expected = there.copy()
    pairs = [(3, 4 * 3 + i, i * small, 0) for i in range(4)]  # decode block 3 <- prefill 12..15
    pairs += [(0, (7 - i), i * small, 0) for i in range(4)]  # scattered, out of order
    with prefill.register_pool((source, small)) as local, decode.register_pool((there, large)) as remote:
        prefill.write_blocks(local, np.array(pairs), remote.metadata, slice=(0, 0, small)).wait(10)
    for r, l, ro, _ in pairs:
        view(expected, large, r)[ro:ro + small] = view(source, small, l)
    assert np.array_equal(there, expected)


def test_strided_blocks_leave_the_gaps_alone(transport):
    owner, reader = connector(transport), connector(transport)
    there = filled(16, 2 * B, 9)  # 16 blocks of B with a gap of B after each
    here = filled(16, 2 * B, 10)
    expected = here.copy()
    pairs = [(i, 15 - i) for i in range(16)]
    with owner.register_pool(memwire.BlockRegion(there, B, stride=2 * B)) as remote, \
            reader.register_pool(memwire.BlockRegion(here, B, stride=2 * B)) as local:
        reader.read_blocks(remote.metadata, pairs, local, slice=(100, 300, 1000)).wait(10)
    for r, l in pairs:
        expected[l * 2 * B + 300:l * 2 * B + 1300] = there[r * 2 * B + 100:r * 2 * B + 1100]
    assert np.array_equal(here, expected)


def test_bad_slices_are_refused_before_anything_moves(transport):
    owner, reader = connector(transport), connector(transport)
    there, here = filled(8, B, 11), filled(8, B // 2, 12)
    before = here.copy()
    with owner.register_pool((there, B)) as remote, reader.register_pool((here, B // 2)) as local:
        md = remote.metadata
        half, top = B // 2, 2**64 - 1
        cases = [
            ([(0, 0)], (half, 0, half + 1), memwire.SizeMismatchError, "remote block 0"),
            ([(0, 0)], (0, 1, half), memwire.SizeMismatchError, "local block 0"),
            ([(0, 0), (1, 1, 0, half - 8)], (0, 0, 16), memwire.SizeMismatchError, "pair 1"),
            ([(0, 0)], (0, 0, 0), memwire.InvalidArgumentError, "0 bytes"),
            ([(0, 0)], (top - 10, 0, 100), memwire.InvalidArgumentError, "overflows"),
            ([(0, 0, 0, top)], (0, 1, 1), memwire.InvalidArgumentError, "overflows"),
            ([(0, 0)], None, memwire.SizeMismatchError, "BlockSlice"),
        ]
        for pairs, part, error, names in cases:
            with pytest.raises(error, match=names):
                reader.read_blocks(md, pairs, local, slice=part).wait(10)
        with pytest.raises(memwire.InvalidArgumentError):
            reader.read_blocks(md, [(0, 0, 1)], local, slice=(0, 0, 1))  # a 3-tuple pair
        with pytest.raises(memwire.InvalidArgumentError):
            reader.read_blocks(md, [(0, 0)], local, slice=(0, -1, 1))
        with pytest.raises(memwire.InvalidArgumentError):
            reader.read_blocks(md, [(0, 0)], local, slice=(0, 1))
    assert np.array_equal(here, before)
