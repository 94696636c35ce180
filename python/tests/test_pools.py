"""Pools from Python: registered once, blocks moved by index over tcp and shm, tags that reach the
owner after their bytes (blocking waits, awaits, async for), closing, stale metadata, bad input."""

import asyncio
import json
import os
import sys
import threading
import time

import numpy as np
import pytest

import memwire

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 4096
TRANSPORTS = ["tcp", "shm"]


def connector(transport):
    return memwire.Connector(transports=[transport], environment=False)


class Memory:
    """Two regions, as a KV cache's K and V: 64 blocks back to back (a NumPy array) and 32 blocks
    with a block-sized gap after each (a bytearray, stride two blocks)."""

    def __init__(self):
        self.packed = np.zeros(64 * BLOCK, dtype=np.uint8)
        self.spaced = bytearray(32 * 2 * BLOCK)

    def regions(self):
        return [(self.packed, BLOCK), memwire.BlockRegion(self.spaced, BLOCK, stride=2 * BLOCK)]

    def block(self, index):
        if index < 64:
            return self.packed[index * BLOCK:(index + 1) * BLOCK]
        at = (index - 64) * 2 * BLOCK
        return np.frombuffer(self.spaced, dtype=np.uint8)[at:at + BLOCK]

    def fill(self, index, seed):
        self.block(index)[:] = pattern(seed)

    def holds(self, index, seed):
        return np.array_equal(self.block(index), pattern(seed))

    def is_zero(self, index):
        return not self.block(index).any()


def pattern(seed, size=BLOCK):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def mixed_pairs():
    pairs = [(10 + i, 20 + i) for i in range(16)]  # one run
    return pairs + [(63, 64), (70, 3), (95, 95), (0, 90)]  # across regions, scattered


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


def test_metadata_round_trips_and_is_compact(transport):
    with connector(transport).register_pool(Memory().regions(), name="kv") as pool:
        md = pool.metadata
        assert pool.block_count == md.block_count == 96
        assert md.name == "kv" and md.generation >= 1
        assert [(r["block_size"], r["stride"], r["count"]) for r in md.regions] == [
            (BLOCK, BLOCK, 64), (BLOCK, 2 * BLOCK, 32)]
        again = memwire.PoolMetadata.from_json(md.to_json())
        assert again == md
        assert memwire.PoolMetadata.from_json(md.to_dict()) == md
        assert memwire.PoolMetadata.from_json(md.to_json().encode()) == md
        assert len(md.to_json()) < 1000
        with pytest.raises(memwire.InvalidMetadataError):
            memwire.PoolMetadata.from_json(md.to_json().replace('"generation"', '"generations"'))
        with pytest.raises(memwire.InvalidMetadataError):
            memwire.PoolMetadata.from_json("[]")


@pytest.mark.parametrize("direction", ["read", "write"])
def test_blocks_by_index_move_exactly_those_bytes(transport, direction):
    owner, peer = connector(transport), connector(transport)
    there, here = Memory(), Memory()
    source, target = (there, here) if direction == "read" else (here, there)
    for b in range(96):
        source.fill(b, 1000 + b)
    with owner.register_pool(there.regions(), name="kv") as remote, peer.register_pool(here.regions()) as local:
        pairs = mixed_pairs()
        if direction == "read":
            op = peer.read_blocks(remote.metadata, pairs, local)
        else:
            op = peer.write_blocks(local, pairs, remote.metadata)
        assert op.wait(30) == memwire.OperationStatus.COMPLETE
        assert op.transport == transport
        assert op.pool is local
        written = set()
        for r, l in pairs:
            to, seed = (l, 1000 + r) if direction == "read" else (r, 1000 + l)
            assert target.holds(to, seed), f"block {to}"
            written.add(to)
        for b in set(range(96)) - written:
            assert target.is_zero(b), f"block {b} touched"
        # The gaps between the spaced region's blocks are not the pool's.
        gaps = np.frombuffer(target.spaced, dtype=np.uint8).reshape(32, 2, BLOCK)[:, 1, :]
        assert not gaps.any()


def test_pairs_may_be_an_array_and_runs_of_a_pool_move_again_and_again(transport):
    owner, peer = connector(transport), connector(transport)
    there, here = Memory(), Memory()
    for b in range(96):
        there.fill(b, 7000 + b)
    with owner.register_pool(there.regions()) as remote, peer.register_pool(here.regions()) as local:
        md = memwire.PoolMetadata.from_json(remote.metadata.to_json())
        for round_ in range(20):
            block = (round_ * 37) % 96
            op = peer.read_blocks(md, np.array([[block, block]], dtype=np.int64), local)
            assert op.wait(30) == memwire.OperationStatus.COMPLETE
            assert here.holds(block, 7000 + block)


def test_a_tag_arrives_after_its_bytes(transport):
    # Blocks of 1 MiB: a tag that overtook its bytes would find them (partly) missing.
    owner, writer = connector(transport), connector(transport)
    size, count = 1 << 20, 16
    there = np.zeros(size * count, dtype=np.uint8)
    here = np.zeros(size * count, dtype=np.uint8)
    for b in range(count):
        here[b * size:(b + 1) * size] = pattern(b, size)
    with owner.register_pool((there, size)) as remote, writer.register_pool((here, size)) as local:
        ops = [writer.write_blocks(local, [(b, b)], remote.metadata, tag=f"layer-{b}") for b in range(count)]
        for b in reversed(range(count)):
            n = remote.wait_for_tag(f"layer-{b}", timeout=30)
            assert n[:4] == memwire.Notification(writer.name, f"layer-{b}")[:4]
            assert np.array_equal(there[b * size:(b + 1) * size], pattern(b, size)), f"layer {b} early"
        for op in ops:
            assert op.wait(30) == memwire.OperationStatus.COMPLETE
        assert remote.queued_notifications == 0


def test_a_reads_tag_reaches_the_owner_after_the_reader_has_the_bytes(transport):
    owner, reader = connector(transport), connector(transport)
    there, here = Memory(), Memory()
    there.fill(5, 6005)
    with owner.register_pool(there.regions()) as remote, reader.register_pool(here.regions()) as local:
        op = reader.read_blocks(remote.metadata, [(5, 7)], local, tag="taken")
        n = remote.wait_for_tag("taken", 10, from_peer=reader.name, kinds=memwire.TagKinds.READS)
        assert (n.peer, n.kind) == (reader.name, memwire.OperationKind.READ)
        assert here.holds(7, 6005)
        assert op.wait(10) == memwire.OperationStatus.COMPLETE


def shared_token(pool):
    return json.loads(pool.metadata.to_json())["token"]


def test_a_reads_tag_ends_no_tag_wait_unless_reads_are_asked_for(transport):
    # Issue 44: a 1-byte tagged read made decode's waits deliver layers with nothing written.
    owner, peer = connector(transport), connector(transport)
    with owner.register_pool(Memory().regions()) as remote, peer.register_pool(Memory().regions()) as local:
        assert peer.read_blocks(remote.metadata, [(5, 7)], local, tag="s/0").wait(10) == memwire.OperationStatus.COMPLETE
        with pytest.raises(memwire.TimeoutError):
            remote.wait_for_tag("s/0", 0.2)
        with pytest.raises(memwire.TimeoutError):
            asyncio.run(remote.tag("s/0", timeout=0.2))
        with pytest.raises(memwire.TimeoutError):
            memwire.LayerReceiver(remote, "s").wait(0, 0.2)
        assert remote.queued_notifications == 1
        memwire.LayerReceiver(remote, "s", kinds=memwire.TagKinds.READS).wait(0, 5)  # takes it
        # A write's tag ends the default waits, and says it was a write under the shared token.
        for layer in (1, 2):
            peer.write_blocks(local, [(0, 0)], remote.metadata, tag=f"s/{layer}").wait(10)
        n = remote.wait_for_tag("s/1", 5)
        assert (n.kind, n.token) == (memwire.OperationKind.WRITE, shared_token(remote))
        memwire.LayerReceiver(remote, "s").wait(2, 5)
        # Asked for, a read's tag comes with its kind; BOTH takes either.
        peer.read_blocks(remote.metadata, [(5, 7)], local, tag="r").wait(10)
        n = asyncio.run(remote.tag("r", timeout=5, kinds=memwire.TagKinds.BOTH))
        assert (n.kind, n.token, n.peer) == (memwire.OperationKind.READ, shared_token(remote), peer.name)
        assert remote.queued_notifications == 0
        for bad in ("writes", True, None):
            with pytest.raises(memwire.InvalidArgumentError):
                remote.wait_for_tag("r", 0.1, kinds=bad)
        with pytest.raises(memwire.InvalidArgumentError, match="kinds"):
            remote.wait_for_tag("r", 0.1, kinds=4)


def test_waits_take_their_tag_and_leave_others_queued(transport):
    owner, writer = connector(transport), connector(transport)
    with owner.register_pool(Memory().regions()) as remote, writer.register_pool(Memory().regions()) as local:
        for tag in ("a", "b", "c"):
            assert writer.write_blocks(local, [(1, 1)], remote.metadata, tag).wait(10) == memwire.OperationStatus.COMPLETE
        assert remote.wait_for_tag("b", 1).tag == "b"
        assert remote.queued_notifications == 2
        assert remote.next_notification(1).tag == "a"
        assert remote.next_notification(1).tag == "c"
        with pytest.raises(memwire.TimeoutError):
            remote.next_notification(0.05)
        with pytest.raises(memwire.TimeoutError):
            remote.wait_for_tag("never", 0.05)
        with pytest.raises(memwire.TimeoutError):
            remote.wait_for_tag("a", 0.05, from_peer="someone-else")


def test_async_for_receives_tags_in_order(transport):
    owner, writer = connector(transport), connector(transport)
    there, here = Memory(), Memory()
    rounds = 64

    async def run():
        with owner.register_pool(there.regions()) as remote, writer.register_pool(here.regions()) as local:
            ops = []
            for r in range(rounds):
                here.fill(r, 5000 + r)
                ops.append(await writer.write_blocks(local, [(r, r)], remote.metadata, str(r)))
            seen = []
            async for n in remote.notifications(timeout=30):
                assert there.holds(int(n.tag), 5000 + int(n.tag)), f"tag {n.tag} before its bytes"
                seen.append(int(n.tag))
                if len(seen) == rounds:
                    break
            for op in ops:
                assert await op.wait_for_completion(30) == memwire.OperationStatus.COMPLETE
            return seen

    assert asyncio.run(run()) == list(range(rounds))


def test_awaiting_tags_layer_by_layer(transport):
    # The README's pattern: prefill writes layer i's blocks tagged "layer-i"; decode awaits each.
    prefill, decode = connector(transport), connector(transport)
    layers, per_layer = 8, 4
    kv_prefill = np.zeros((layers * per_layer, BLOCK), dtype=np.uint8)
    kv_decode = np.zeros_like(kv_prefill)

    async def run():
        with decode.register_pool((kv_decode, BLOCK), name="kv") as mine, prefill.register_pool((kv_prefill, BLOCK)) as theirs:
            md = memwire.PoolMetadata.from_json(mine.metadata.to_json())

            async def produce():
                for i in range(layers):
                    blocks = range(i * per_layer, (i + 1) * per_layer)
                    for b in blocks:
                        kv_prefill[b] = pattern(b)
                    op = prefill.write_blocks(theirs, [(b, b) for b in blocks], md, tag=f"layer-{i}")
                    await op.wait_for_completion(30)
                    await asyncio.sleep(0.001)

            producer = asyncio.create_task(produce())
            done = []
            for i in range(layers):
                n = await mine.tag(f"layer-{i}", timeout=30)
                assert n.peer == prefill.name
                for b in range(i * per_layer, (i + 1) * per_layer):
                    assert np.array_equal(kv_decode[b], pattern(b))
                done.append(i)
            await producer
            return done

    assert asyncio.run(run()) == list(range(layers))


def test_a_cancelled_await_takes_no_notification(transport):
    owner, writer = connector(transport), connector(transport)

    async def run():
        with owner.register_pool(Memory().regions()) as remote, writer.register_pool(Memory().regions()) as local:
            waiting = asyncio.create_task(remote.tag("x"))
            await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            with pytest.raises(memwire.TimeoutError):
                await remote.notification(timeout=0.05)
            op = await writer.write_blocks(local, [(0, 0)], remote.metadata, "x")
            await op.wait_for_completion(10)
            assert (await remote.tag("x", timeout=10)).tag == "x"
            # Two waits at once, for different tags, each gets its own.
            first = asyncio.create_task(remote.tag("1", timeout=10))
            second = asyncio.create_task(remote.notification(timeout=10))
            await asyncio.sleep(0.01)
            for tag in ("2", "1"):
                await (await writer.write_blocks(local, [(0, 0)], remote.metadata, tag)).wait_for_completion(10)
            return (await first).tag, (await second).tag

    assert asyncio.run(run()) == ("1", "2")


def test_a_wait_cancelled_as_its_tag_arrives_leaves_it_to_the_next(transport):
    # Wherever the cancel lands (before the loop saw the pool's fd, after it woke the wait, after
    # the task took the tag), the tag is taken once: by the cancelled task or by the next wait.
    owner, writer = connector(transport), connector(transport)

    async def run():
        with owner.register_pool(Memory().regions()) as remote, writer.register_pool(Memory().regions()) as local:
            for steps in range(6):
                waiting = asyncio.create_task(remote.tag("x"))
                await asyncio.sleep(0.01)
                writer.write_blocks(local, [(0, 0)], remote.metadata, "x").wait(10)
                deadline = time.monotonic() + 10
                while remote.queued_notifications == 0 and time.monotonic() < deadline:
                    time.sleep(0.001)  # the loop is held: the tag is queued before it looks
                for _ in range(steps):
                    await asyncio.sleep(0)
                waiting.cancel()
                try:
                    got = [await waiting]
                except asyncio.CancelledError:
                    got = []
                try:
                    got.append(await remote.tag("x", timeout=0.2))
                except memwire.TimeoutError:
                    pass
                assert [n.tag for n in got] == ["x"], f"cancelled after {steps} loop steps"

    asyncio.run(run())


def test_a_blocking_wait_releases_the_gil(transport):
    owner, writer = connector(transport), connector(transport)
    with owner.register_pool(Memory().regions()) as remote, writer.register_pool(Memory().regions()) as local:
        got = []
        waiter = threading.Thread(target=lambda: got.append(remote.wait_for_tag("go", 20)))
        waiter.start()
        # This thread runs Python while the other waits: the write and its tag go through.
        assert writer.write_blocks(local, [(2, 2)], remote.metadata, "go").wait(10) == memwire.OperationStatus.COMPLETE
        waiter.join(20)
        assert got and got[0].tag == "go"


def test_a_closed_pool_refuses_its_peers_as_stale(transport):
    owner, reader = connector(transport), connector(transport)
    there = Memory()
    with reader.register_pool(Memory().regions()) as local:
        remote = owner.register_pool(there.regions(), name="kv")
        md = remote.metadata
        remote.close()
        assert remote.closed
        op = reader.read_blocks(md, [(0, 0)], local)
        with pytest.raises(memwire.ExpiredError, match="stale pool metadata"):
            op.wait(10)
        # Registered again: the old metadata stays refused, the new moves bytes.
        with owner.register_pool(there.regions(), name="kv") as again:
            assert again.metadata.generation > md.generation
            write = reader.write_blocks(local, [(0, 0)], md)
            with pytest.raises(memwire.ExpiredError):
                write.wait(10)
            assert reader.write_blocks(local, [(0, 0)], again.metadata).wait(10) == memwire.OperationStatus.COMPLETE
        with pytest.raises(memwire.InvalidArgumentError):
            remote.block_count
        with pytest.raises(memwire.InvalidArgumentError):
            reader.read_blocks(md, [(0, 0)], remote)


def test_closing_a_pool_ends_its_waits(transport):
    owner = connector(transport)
    pool = owner.register_pool(Memory().regions())
    errors = []

    def wait():
        try:
            pool.wait_for_tag("never", 20)
        except memwire.MemwireError as error:
            errors.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()

    async def run():
        awaiting = asyncio.create_task(pool.notification(timeout=20))
        collected = []

        async def collect():
            async for n in pool.notifications():
                collected.append(n)
            return "ended"

        iterating = asyncio.create_task(collect())
        await asyncio.sleep(0.05)
        pool.close()
        with pytest.raises(memwire.CancelledError):
            await awaiting
        return await asyncio.wait_for(iterating, 10), collected

    assert asyncio.run(run()) == ("ended", [])
    waiter.join(20)
    assert len(errors) == 1 and isinstance(errors[0], memwire.CancelledError)
    with pytest.raises(memwire.CancelledError):
        pool.next_notification(1)


def test_bad_pairs_and_regions_raise(transport):
    owner, peer = connector(transport), connector(transport)
    big = np.zeros(4 * 2 * BLOCK, dtype=np.uint8)
    with owner.register_pool(Memory().regions()) as remote, peer.register_pool(Memory().regions()) as local, \
            peer.register_pool((big, 2 * BLOCK)) as other:
        md = remote.metadata
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [(96, 0)], local)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [(0, 96)], local)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [], local)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [(-1, 0)], local)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [(0, 1, 2)], local)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [("a", 0)], local)
        with pytest.raises(memwire.SizeMismatchError):
            peer.read_blocks(md, [(0, 0)], other)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.write_blocks(local, [(0, 0)], md, "t" * 1025)
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [(0, 0)], remote)  # another connector's pool
        with pytest.raises(memwire.InvalidArgumentError):
            peer.read_blocks(md, [(0, 0)], big)  # not a Pool
        with pytest.raises(memwire.InvalidMetadataError):
            peer.read_blocks("{}", [(0, 0)], local)
    buffer = np.zeros(10 * BLOCK, dtype=np.uint8)
    for regions in ([], (buffer, 0), (buffer, BLOCK, 0, 11), (buffer, BLOCK, BLOCK // 2),
                    (buffer, 11 * BLOCK), [(buffer, BLOCK), "x"], (bytes(BLOCK), BLOCK)):
        with pytest.raises(memwire.InvalidArgumentError):
            owner.register_pool(regions)


def test_a_pool_refuses_what_its_options_forbid(transport):
    owner, peer = connector(transport), connector(transport)
    there = Memory()
    there.fill(0, 9)
    with owner.register_pool(there.regions(), remote_write=False) as read_only, \
            peer.register_pool(Memory().regions()) as local:
        write = peer.write_blocks(local, [(0, 0)], read_only.metadata, "no")
        with pytest.raises(memwire.AccessDeniedError):
            write.wait(10)
        # Counted as a refusal (the peer asked for what the pool forbids), not as a fault.
        assert read_only.refusals == 1
        assert read_only.peer_faults == 0
        # Never admitted: neither its tag nor a failure reaches the owner's waiters.
        with pytest.raises(memwire.TimeoutError):
            read_only.wait_for_tag("no", 0.3)
        assert peer.read_blocks(read_only.metadata, [(0, 0)], local).wait(10) == memwire.OperationStatus.COMPLETE
    # Read-only memory: a source only.
    source = bytes(pattern(3, 2 * BLOCK).tobytes())
    with owner.register_pool((source, BLOCK), remote_write=False) as constant, \
            peer.register_pool((np.zeros(2 * BLOCK, dtype=np.uint8), BLOCK)) as sink:
        assert constant.readonly
        with pytest.raises(memwire.InvalidArgumentError):
            owner.read_blocks(sink.metadata, [(0, 0)], constant)
        assert owner.write_blocks(constant, [(1, 0)], sink.metadata).wait(10) == memwire.OperationStatus.COMPLETE


def test_a_full_notification_queue_fails_the_sender(transport):
    owner, writer = connector(transport), connector(transport)
    with owner.register_pool(Memory().regions(), max_queued_notifications=3) as remote, \
            writer.register_pool(Memory().regions()) as local:
        for n in range(3):
            assert writer.write_blocks(local, [(0, 0)], remote.metadata, str(n)).wait(10) == memwire.OperationStatus.COMPLETE
        refused = writer.write_blocks(local, [(0, 0)], remote.metadata, "3")
        with pytest.raises(memwire.TransportError, match="max_queued_notifications"):
            refused.wait(10)
        assert remote.next_notification(1).tag == "0"
        assert writer.write_blocks(local, [(0, 0)], remote.metadata, "4").wait(10) == memwire.OperationStatus.COMPLETE


def test_the_queue_shares_are_cxx_pool_options_by_name(transport):
    owner, writer = connector(transport), connector(transport)
    with owner.register_pool(Memory().regions(), max_queued_shared=2) as remote, \
            writer.register_pool(Memory().regions()) as local:
        for n in range(2):
            assert writer.write_blocks(local, [(0, 0)], remote.metadata, str(n)).wait(10) == memwire.OperationStatus.COMPLETE
        with pytest.raises(memwire.TransportError, match="max_queued_shared"):
            writer.write_blocks(local, [(0, 0)], remote.metadata, "2").wait(10)
    with pytest.raises(memwire.InvalidArgumentError, match="max_queued_nonsense"):
        owner.register_pool(Memory().regions(), max_queued_nonsense=1)


def test_a_block_transfer_is_an_operation(transport):
    owner, peer = connector(transport), connector(transport)

    async def run():
        with owner.register_pool(Memory().regions()) as remote, peer.register_pool(Memory().regions()) as local:
            async with await peer.read_blocks(remote.metadata, [(1, 2)], local) as op:
                assert await op.wait_for_completion(10) == memwire.OperationStatus.COMPLETE
                assert op.status == memwire.OperationStatus.COMPLETE
                assert op.kind == memwire.OperationKind.READ
                assert isinstance(op, memwire.BlockTransfer)
            with peer.write_blocks(local, [(1, 2)], remote.metadata) as op:
                assert op.wait(10) == memwire.OperationStatus.COMPLETE
                assert op.kind == memwire.OperationKind.WRITE

    asyncio.run(run())


def test_regions_of_torch_cpu_tensors(transport):
    torch = pytest.importorskip("torch")
    owner, peer = connector(transport), connector(transport)
    there = torch.arange(8 * 256, dtype=torch.float32).reshape(8, 256)  # blocks of 1 KiB
    here = torch.zeros(8, 256, dtype=torch.float32)
    with owner.register_pool((there, 1024)) as remote, peer.register_pool((here, 1024)) as local:
        assert remote.block_count == 8
        assert peer.read_blocks(remote.metadata, [(6, 1)], local).wait(10) == memwire.OperationStatus.COMPLETE
        assert torch.equal(here[1], there[6]) and not here[0].any()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_peer_process_awaits_layers_we_write(children, transport):
    # The other process owns the pool and awaits "layer-i" before checking layer i's blocks.
    layers, per_layer = 6, 3
    other = children([sys.executable, os.path.join(HERE, "pool_peer.py"), transport, str(layers), str(per_layer), str(BLOCK)])
    md = memwire.PoolMetadata.from_json(other.read_line())
    here = np.zeros((layers * per_layer, BLOCK), dtype=np.uint8)
    writer = connector(transport)
    with writer.register_pool((here, BLOCK)) as local:
        for i in range(layers):
            blocks = range(i * per_layer, (i + 1) * per_layer)
            for b in blocks:
                here[b] = pattern(100 + b)
            assert writer.write_blocks(local, [(b, b) for b in blocks], md, tag=f"layer-{i}").wait(30) == \
                memwire.OperationStatus.COMPLETE
        assert other.read_line() == f"done {layers} ok"
