"""Two Python processes move numpy arrays, torch tensors and bytearrays both ways; every byte is
checked against the pattern by the receiving side."""

import asyncio

import numpy as np
import pytest

import memwire
from peer import check, make_buffers

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # Debian: python3-torch
    HAVE_TORCH = False

KINDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAVE_TORCH, reason="python3-torch not installed")), "bytearray"]
SHAPES = [(4096 * 3 + 5, 3), (8 << 20, 1)]


def each_kind_and_shape(test):
    """The test for every kind of buffer (KINDS) in every shape (SHAPES)."""
    return pytest.mark.parametrize("kind", KINDS)(pytest.mark.parametrize("size,descs", SHAPES)(test))


def local(kind, size, seed, descs, fill):
    buffers = make_buffers(kind, size, seed, descs, fill)
    return buffers, [memwire.Descriptor(b) for b in buffers]


@each_kind_and_shape
def test_read_from_a_python_peer(peer, kind, size, descs):
    seed = 11
    other = peer("readable", kind, size, seed, descs)

    async def run():
        buffers, descriptors = local(kind, size, 0, descs, fill=False)
        remote = memwire.RdmaMetadata.from_json(other.read_line())
        op = await memwire.Connector().begin_read(remote, descriptors)
        assert await op.wait_for_completion(timeout=30) == memwire.OperationStatus.COMPLETE
        assert op.results()[0].data is buffers[0]
        return check(buffers, seed, size), op.transport

    result, transport = asyncio.run(run())
    assert result == "ok"
    assert transport in ("shm", "tcp")
    assert other.read_line().startswith("done COMPLETE -")


@each_kind_and_shape
def test_a_python_peer_reads_from_us(peer, kind, size, descs):
    seed = 12
    other = peer("read", kind, size, seed, descs)

    async def run():
        buffers, descriptors = local(kind, size, seed, descs, fill=True)
        async with await memwire.Connector().create_readable(descriptors) as readable:
            other.send(readable.metadata().to_json())
            return await readable.wait_for_completion(timeout=30)

    assert asyncio.run(run()) == memwire.OperationStatus.COMPLETE
    assert other.read_line() == "begun"
    assert other.read_line().split()[:3] == ["done", "COMPLETE", "ok"]


@each_kind_and_shape
def test_write_into_a_python_peer(peer, kind, size, descs):
    seed = 13
    other = peer("writable", kind, size, seed, descs)

    async def run():
        _, descriptors = local(kind, size, seed, descs, fill=True)
        remote = memwire.RdmaMetadata.from_json(other.read_line())
        op = await memwire.Connector().begin_write(descriptors, remote)
        return await op.wait_for_completion(timeout=30)

    assert asyncio.run(run()) == memwire.OperationStatus.COMPLETE
    assert other.read_line().split()[:3] == ["done", "COMPLETE", "ok"]


@each_kind_and_shape
def test_a_python_peer_writes_into_us(peer, kind, size, descs):
    seed = 14
    other = peer("write", kind, size, seed, descs)

    async def run():
        buffers, descriptors = local(kind, size, 0, descs, fill=False)
        with await memwire.Connector().create_writable(descriptors) as writable:
            other.send(writable.metadata().to_json())
            status = await writable.wait_for_completion(timeout=30)
        return status, check(buffers, seed, size)

    assert asyncio.run(run()) == (memwire.OperationStatus.COMPLETE, "ok")
    assert other.read_line() == "begun"
    assert other.read_line().startswith("done COMPLETE -")


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_each_transport_between_processes(peer, transport, monkeypatch):
    # The peer inherits MEMWIRE_TRANSPORTS: both ends offer only this transport.
    monkeypatch.setenv("MEMWIRE_TRANSPORTS", transport)
    size, seed = 3 << 20, 15
    other = peer("readable", "numpy", size, seed)

    async def run():
        buffers, descriptors = local("numpy", size, 0, 1, fill=False)
        op = await memwire.Connector().begin_read(memwire.RdmaMetadata.from_json(other.read_line()), descriptors)
        await op.wait_for_completion(timeout=30)
        return check(buffers, seed, size), op.transport

    assert asyncio.run(run()) == ("ok", transport)


def test_a_killed_peer_is_peer_lost(peer):
    # The owner of the readable memory dies before we read: the read fails at once with
    # PeerLostError (nobody listens at its endpoint), not after the timeout.
    other = peer("readable", "numpy", 1 << 20, 16)
    remote = memwire.RdmaMetadata.from_json(other.read_line())
    other.kill()

    async def run():
        target = np.zeros(1 << 20, dtype=np.uint8)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(memwire.PeerLostError):  # at begin_read (connect refused) or later
            op = await memwire.Connector().begin_read(remote, memwire.Descriptor(target))
            await op.wait_for_completion(timeout=20)
        return loop.time() - started

    assert asyncio.run(run()) < 10


def test_a_writer_killed_mid_transfer_fails_the_passive_side(peer):
    # The passive side hears of the failure too: a writer killed while its bytes are on the way
    # leaves our writable operation ERRORED with PeerLostError at once, not waiting for its
    # deadline (or COMPLETE with every byte right, had it finished before the kill).
    size = 128 << 20
    other = peer("write", "numpy", size, 17)

    async def run():
        target = np.zeros(size, dtype=np.uint8)
        async with await memwire.Connector(transports=["tcp"]).create_writable(memwire.Descriptor(target)) as op:
            other.send(op.metadata().to_json())
            assert other.read_line() == "begun"
            other.kill()
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                status = await op.wait_for_completion(timeout=20)
            except memwire.PeerLostError:
                return "PeerLostError", loop.time() - started
            return status.name, check([target], 17, size)

    outcome = asyncio.run(run())
    print("outcome:", outcome)
    assert outcome[0] == "PeerLostError" and outcome[1] < 5 or outcome == ("COMPLETE", "ok"), outcome
