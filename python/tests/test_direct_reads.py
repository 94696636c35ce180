"""shm_direct_reads: an owner that opts in is read by a peer of its own user without being
asked (the peer's own process_vm_readv), so an untagged READ completes while the owner process
is stopped; without the opt-in, or with a tag, the stopped owner holds the READ up."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import memwire

BLOCK, BLOCKS = 4096, 8

OWNER = """
import sys
import numpy as np
import memwire
direct = sys.argv[1] == "1"
connector = memwire.Connector(transports=["shm"], environment=False, shm_direct_reads=direct)
memory = np.arange(%d, dtype=np.uint64).view(np.uint8)
pool = connector.register_pool((memory, %d))
print(pool.metadata.to_json(), flush=True)
sys.stdin.readline()
""" % (BLOCK * BLOCKS // 8, BLOCK)


def expected(block):
    return np.arange(BLOCK * BLOCKS // 8, dtype=np.uint64).view(np.uint8)[block * BLOCK:(block + 1) * BLOCK]


@pytest.fixture
def owner():
    started = []

    def start(direct):
        child = subprocess.Popen([sys.executable, "-c", OWNER, "1" if direct else "0"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        started.append(child)
        return child, memwire.PoolMetadata.from_json(child.stdout.readline())

    yield start
    for child in started:
        child.send_signal(signal.SIGCONT)
        child.stdin.close()
        child.wait(10)


def reader():
    connector = memwire.Connector(transports=["shm"], environment=False)
    memory = np.zeros(BLOCK * BLOCKS, dtype=np.uint8)
    return connector, memory, connector.register_pool((memory, BLOCK))


def read(connector, memory, pool, remote, block, timeout, tag=""):
    memory[:] = 0
    op = connector.read_blocks(remote, [(block, 0)], pool, tag=tag)
    try:
        status = op.wait(timeout=timeout)
    except memwire.TimeoutError:
        return op
    assert status == memwire.OperationStatus.COMPLETE
    assert np.array_equal(memory[:BLOCK], expected(block))
    return None


def test_an_owner_that_opts_in_is_read_while_it_is_stopped(owner):
    child, remote = owner(direct=True)
    connector, memory, pool = reader()
    assert read(connector, memory, pool, remote, 0, 10) is None  # connects while the owner runs
    os.kill(child.pid, signal.SIGSTOP)
    assert read(connector, memory, pool, remote, 5, 5) is None
    # A tag is the owner's to deliver: that READ still asks it.
    stalled = read(connector, memory, pool, remote, 3, 0.3, tag="layer-0")
    assert stalled is not None
    os.kill(child.pid, signal.SIGCONT)
    assert stalled.wait(timeout=10) == memwire.OperationStatus.COMPLETE


def test_without_the_opt_in_a_stopped_owner_holds_the_read(owner):
    child, remote = owner(direct=False)
    connector, memory, pool = reader()
    assert read(connector, memory, pool, remote, 0, 10) is None
    os.kill(child.pid, signal.SIGSTOP)
    stalled = read(connector, memory, pool, remote, 5, 0.3)
    assert stalled is not None
    os.kill(child.pid, signal.SIGCONT)
    assert stalled.wait(timeout=10) == memwire.OperationStatus.COMPLETE
    assert np.array_equal(memory[:BLOCK], expected(5))


def test_the_option_is_a_bool():
    with pytest.raises(memwire.InvalidArgumentError, match="shm_direct_reads"):
        memwire.Connector(transports=["shm"], environment=False, shm_direct_reads="yes")
