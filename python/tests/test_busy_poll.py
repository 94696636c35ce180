"""Connector(busy_poll=...) reaches the connector: an owner's event loop keeps polling that long
after it served a READ (its CPU time shows it), and sleeps at once with 0; bad values are
refused."""

import os
import time

import numpy as np
import pytest

import memwire


def loop_threads_cpu_ns():
    """CPU time so far of this process's tcp event-loop threads (/proc schedstat)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().strip() != "memwire-tcp":
                    continue
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except OSError:
            continue  # a thread that ended meanwhile
    return total


def loops_cpu_after_a_read(owner_busy_poll):
    owner = memwire.Connector(transports=["tcp"], busy_poll=owner_busy_poll, environment=False)
    reader = memwire.Connector(transports=["tcp"], busy_poll=0, environment=False)
    source = np.full(4096, 9, dtype=np.uint8)
    target = np.zeros(4096, dtype=np.uint8)
    owned = owner.register_pool((source, 4096))
    mine = reader.register_pool((target, 4096))
    # Twice: the first READ's request may be read together with the connection's first frame,
    # and an owner polls only after a request that came alone.
    for _ in range(2):
        target[:] = 0
        read = reader.read_blocks(owned.metadata, [(0, 0)], mine, tag="")
        assert read.wait(timeout=10) == memwire.OperationStatus.COMPLETE
        assert (target == 9).all()
    start = loop_threads_cpu_ns()
    time.sleep(0.04)
    return (loop_threads_cpu_ns() - start) / 1e6  # ms


def test_an_owner_polls_for_its_busy_poll_after_a_read():
    # A loaded machine may give the polling thread little of a CPU in one try: the best of three.
    assert max(loops_cpu_after_a_read(0.01) for _ in range(3)) >= 3.0
    assert min(loops_cpu_after_a_read(0) for _ in range(3)) < 3.0


@pytest.mark.parametrize("bad", [-1e-6, 0.02, True, "50us", [0]])
def test_a_busy_poll_out_of_range_is_refused(bad):
    with pytest.raises(memwire.InvalidArgumentError, match="busy_poll"):
        memwire.Connector(busy_poll=bad)
