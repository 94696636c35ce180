"""Cancelling the task that awaits Worker.read or Worker.request stops the C++ Worker's call
(its stop token): the task ends promptly, well within the call's timeout, and no byte lands
in the caller's memory after it ended."""

import asyncio
import signal
import time
import uuid

import pytest

import memwire


@pytest.fixture(params=["http", "nats"])
def make_channel(request):
    if request.param == "http":
        endpoint = request.getfixturevalue("http_endpoint")
        return lambda: memwire.HttpChannel(endpoint.url)
    url = request.getfixturevalue("nats_url")
    return lambda: memwire.NatsChannel(url)


async def cancel_after(task, seconds):
    await asyncio.sleep(seconds)
    task.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    return time.monotonic() - started


def test_cancelling_a_read_mid_transfer_ends_it_and_no_byte_lands_after(make_channel, peer):
    size = 32 << 20
    owner = peer("readable", "numpy", size, 5)  # another process: SIGSTOP makes it slow

    async def main():
        name = f"py.slow-{uuid.uuid4().hex[:12]}"
        await make_channel().publish(name, memwire.RdmaMetadata.from_json(owner.read_line()))
        owner.process.send_signal(signal.SIGSTOP)
        try:
            reader = memwire.Worker(memwire.Connector(transports=["tcp"]), make_channel())
            target = bytearray(size)
            task = asyncio.create_task(reader.read(name, memwire.Descriptor(target), timeout=30))
            took = await cancel_after(task, 0.5)  # the lookup is one local round trip
            assert took < 3.0, f"the cancelled read ended {took:.1f} s after the cancel"
            target[:] = b"\xee" * size  # ours again: mark it, let the owner answer the reads
        finally:
            owner.process.send_signal(signal.SIGCONT)
        await asyncio.sleep(1.0)
        assert target.count(b"\xee") == size, "bytes landed after the cancelled read ended"

    asyncio.run(main())
    owner.kill()


def test_cancelling_a_request_revokes_the_owners_access(make_channel):
    async def main():
        owner = memwire.Worker(memwire.Connector(), make_channel())
        requester = memwire.Worker(memwire.Connector(), make_channel())
        asked, gave_up = asyncio.Event(), asyncio.Event()

        async def handler(name):  # writes only once the requester gave up
            asked.set()
            await gave_up.wait()
            return bytearray(b"L" * 4096)

        prefix = f"py.late-{uuid.uuid4().hex[:12]}"
        async with await owner.serve(prefix, handler):
            target = bytearray(4096)
            task = asyncio.create_task(requester.request(f"{prefix}.x", memwire.Descriptor(target), timeout=30))
            await asyncio.wait_for(asked.wait(), 10)
            took = await cancel_after(task, 0)
            assert took < 3.0, f"the cancelled request ended {took:.1f} s after the cancel"
            gave_up.set()
            await asyncio.sleep(1.0)  # the owner's write, refused
            assert target == bytearray(4096), "the owner wrote after the request ended"

    asyncio.run(main())
