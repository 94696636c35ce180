"""Sideband calls are asynchronous without asyncio's default executor, and cancellable: a
cancelled wait for a name lets go of its thread at once, so nothing queues behind it."""

import asyncio
import time
import uuid

import pytest

import memwire


@pytest.fixture(params=["http", "nats"])
def make_channel(request):
    if request.param == "http":
        endpoint = request.getfixturevalue("http_endpoint")
        return lambda **kw: memwire.HttpChannel(endpoint.url, **kw)
    url = request.getfixturevalue("nats_url")
    return lambda **kw: memwire.NatsChannel(url, **kw)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_lookups_never_use_the_default_executor(make_channel):
    async def main():
        owner = memwire.Worker(memwire.Connector(), make_channel())
        reader = memwire.Worker(memwire.Connector(), make_channel())
        name = unique("py.noexec")
        data = bytearray(b"q" * 4096)
        async with await owner.publish(name, memwire.Descriptor(data)):
            target = bytearray(4096)
            await reader.read(name, memwire.Descriptor(target), timeout=10)
            assert target == data
            assert name in await reader.channel.list()
            await reader.channel.wait_for(name, timeout=10)
            await reader.channel.fetch(name, timeout=10)
        prefix = unique("py.served")
        async with await owner.serve(prefix, lambda name: bytearray(b"v" * 16)):
            answer = bytearray(16)
            await reader.request(f"{prefix}.a", memwire.Descriptor(answer), timeout=10)
            assert answer == b"v" * 16
        assert asyncio.get_running_loop()._default_executor is None, "a sideband call borrowed the default executor"

    asyncio.run(main())


def test_cancelled_waits_free_their_threads_at_once(make_channel):
    async def main():
        # Two call threads only: if cancelling did not stop the waits, the later calls would
        # queue behind them until their 60 s timeout.
        worker = memwire.Worker(memwire.Connector(), make_channel(max_calls=2))
        owner = memwire.Worker(memwire.Connector(), make_channel())
        waits = [
            asyncio.create_task(worker.read(unique("py.never"), memwire.Descriptor(bytearray(8)), timeout=60, wait=True))
            for _ in range(6)
        ]
        await asyncio.sleep(0.3)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        name = unique("py.now")
        async with await owner.publish(name, memwire.Descriptor(bytearray(b"n" * 64))):
            started = time.monotonic()
            names = await asyncio.wait_for(worker.channel.list(), 10)
            target = bytearray(64)
            await asyncio.wait_for(worker.read(name, memwire.Descriptor(target), timeout=10), 10)
            took = time.monotonic() - started
        assert name in names and target == b"n" * 64
        assert took < 3.0, f"list + read took {took:.1f} s behind cancelled waits"

    asyncio.run(main())


def test_asyncio_run_exits_promptly_after_a_cancelled_wait(make_channel):
    channel = make_channel()

    async def main():
        worker = memwire.Worker(memwire.Connector(), channel)
        task = asyncio.create_task(worker.read(unique("py.gone"), memwire.Descriptor(bytearray(8)), timeout=60, wait=True))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(main())
    took = time.monotonic() - started
    assert took < 3.0, f"asyncio.run took {took:.1f} s to end after a cancelled wait"


def test_a_lookup_does_not_queue_behind_pending_waits(make_channel):
    async def main():
        worker = memwire.Worker(memwire.Connector(), make_channel())
        owner = memwire.Worker(memwire.Connector(), make_channel())
        # The second round starts more waits than the first left idle threads: they must not
        # all count on those few (the fetch would queue behind waits of 60 s).
        for count in (3, 8):
            waits = [
                asyncio.create_task(worker.channel.wait_for(unique("py.pending"), timeout=60))
                for _ in range(count)
            ]
            await asyncio.sleep(0.2)
            name = unique("py.ready")
            async with await owner.publish(name, memwire.Descriptor(bytearray(b"r" * 64))):
                started = time.monotonic()
                await asyncio.wait_for(worker.channel.fetch(name, timeout=10), 10)
                took = time.monotonic() - started
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            await asyncio.sleep(1.5)  # the cancelled waits' threads are idle again
            assert took < 0.5, f"a fetch took {took:.2f} s behind {count} pending waits"

    asyncio.run(main())
