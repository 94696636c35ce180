"""Lifetimes: whatever a lease, an operation or a subscription uses outlives it, whatever order
Python drops things in; a forgotten lease or operation is released when collected, never with a
crash. Each scenario runs in a child interpreter: a crash there is an exit status here."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import python_env

PRELUDE = textwrap.dedent(
    """
    import asyncio, faulthandler, gc, sys
    import numpy as np
    import memwire
    faulthandler.enable()
    def http_worker(endpoint):
        return memwire.Worker(memwire.Connector(), memwire.HttpChannel(endpoint.url))
    """
)


def run_child(body, timeout=60):
    code = PRELUDE + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=timeout
    )
    return result.returncode, result.stdout, result.stderr


def check(body):
    """Runs `body` in a child; it must exit 0 having reached its end (where it prints "ok")."""
    rc, out, err = run_child(textwrap.dedent(body) + 'print("ok")\n')
    assert rc == 0 and out.strip().endswith("ok"), f"exit {rc}\nstdout: {out[-2000:]}\nstderr: {err[-4000:]}"
    return out


def test_a_lease_left_unreleased_in_a_returning_coroutine():
    check(
        """
        async def main():
            endpoint = memwire.HttpEndpoint()
            worker = http_worker(endpoint)
            data = bytearray(4096)
            lease = await worker.publish("left.behind", memwire.Descriptor(data))
            await asyncio.sleep(0.05)
        for _ in range(3):
            asyncio.run(main())
        """
    )


def test_a_returned_lease_outlives_its_worker_and_connector():
    check(
        """
        endpoint = memwire.HttpEndpoint()
        async def publish():
            worker = http_worker(endpoint)
            return await worker.publish("returned", memwire.Descriptor(bytearray(4096)))
        async def main():
            lease = await publish()
            gc.collect()
            # The lease still works: its worker, connector and channel are alive under it.
            assert lease.name == "returned" and lease.metadata() is not None
            reader = http_worker(endpoint)
            target = bytearray(4096)
            await reader.read("returned", memwire.Descriptor(target), timeout=10)
            del lease
            gc.collect()
            # Collected: released, so the name is withdrawn.
            assert "returned" not in await reader.channel.list()
        asyncio.run(main())
        """
    )


def test_a_lease_in_a_reference_cycle_is_collected_safely():
    check(
        """
        endpoint = memwire.HttpEndpoint()
        async def main():
            worker = http_worker(endpoint)
            lease = await worker.publish("cycle", memwire.Descriptor(bytearray(64)))
            worker.cycle = lease  # worker -> lease -> worker: only the collector frees them
            del worker, lease
            gc.collect()
        asyncio.run(main())
        gc.collect()
        """
    )


def test_operations_outlive_the_connector_they_came_from():
    check(
        """
        async def main():
            readable = memwire.Connector().create_readable(memwire.Descriptor(np.arange(1024, dtype=np.uint8)))
            writable = memwire.Connector().create_writable(memwire.Descriptor(bytearray(64)))
            target = bytearray(1024)
            read = memwire.Connector().begin_read(readable.metadata(), memwire.Descriptor(target))
            await read.wait_for_completion(timeout=10)
            assert bytes(target) == bytes(np.arange(1024, dtype=np.uint8))
            gc.collect()
            assert readable.metadata() is not None and writable.status is not None
        for _ in range(3):
            asyncio.run(main())
        gc.collect()
        """
    )


def test_an_operation_keeps_its_memory_when_only_the_native_half_is_left():
    check(
        """
        async def main():
            connector = memwire.Connector()
            readable = connector.create_readable(memwire.Descriptor(np.full(1 << 20, 7, dtype=np.uint8)))
            native = readable._native  # the Python object (and its descriptors) go
            md = readable.metadata()
            del readable
            gc.collect()
            np.full(1 << 20, 1, dtype=np.uint8)  # would reuse the freed memory
            target = bytearray(1 << 20)
            read = connector.begin_read(md, memwire.Descriptor(target))
            await read.wait_for_completion(timeout=10)
            assert target == bytes([7]) * (1 << 20), "the source's memory was freed under it"
            native.close()
        asyncio.run(main())
        """
    )


def test_a_subscription_left_open_outlives_its_worker():
    check(
        """
        endpoint = memwire.HttpEndpoint()
        async def main():
            worker = http_worker(endpoint)
            return await worker.serve("served", lambda name: bytearray(b"x" * 16))
        async def ask():
            requester = http_worker(endpoint)
            target = bytearray(16)
            await requester.request("served.a", memwire.Descriptor(target), timeout=10)
            assert target == b"x" * 16
        subscription = asyncio.run(main())
        gc.collect()
        asyncio.run(ask())
        del subscription
        gc.collect()
        """
    )


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_each_event_loop_lets_go_of_its_eventfd_and_itself():
    # One asyncio.run() per request (a common sync wrapper): each loop's completion notifier
    # (an eventfd) and the loop itself are released once the loop is closed.
    import gc
    import weakref

    import memwire

    owner, reader = memwire.Connector(), memwire.Connector()
    source = bytearray(b"y" * 4096)
    loops = []

    async def one_read():
        loops.append(weakref.ref(asyncio.get_running_loop()))
        readable = owner.create_readable(memwire.Descriptor(source))
        target = bytearray(4096)
        read = reader.begin_read(readable.metadata(), memwire.Descriptor(target))
        await read.wait_for_completion(timeout=10)
        await readable.wait_for_completion(timeout=10)
        assert target == source

    import asyncio

    for _ in range(3):
        asyncio.run(one_read())  # warm up: lazily made fds (the selector's, the pool's)
    gc.collect()
    before = open_fds()
    for _ in range(60):
        asyncio.run(one_read())
    gc.collect()
    grown = open_fds() - before
    alive = sum(1 for ref in loops if ref() is not None)
    assert grown <= 2, f"{grown} descriptors more after 60 loops"
    assert alive <= 1, f"{alive} of {len(loops)} closed loops still alive"
