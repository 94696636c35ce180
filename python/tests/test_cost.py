"""Cost: a small transfer's wait ends without a trip through the event loop (its wake-up costs
more than the transfer: eventfd, epoll, callback, task step), which is most of what Python
added to a 4 KiB READ round trip (bench/python_overhead)."""

import asyncio

import memwire
import memwire.connector


def count_loop_wakeups(reads):
    owner, reader = memwire.Connector(), memwire.Connector()
    source, target = bytearray(b"c" * 4096), bytearray(4096)
    polls = [0]

    async def main():
        selector = asyncio.get_running_loop()._selector
        select = selector.select

        def counted(timeout=None):
            polls[0] += 1
            return select(timeout)

        selector.select = counted
        for _ in range(reads):
            readable = owner.create_readable(memwire.Descriptor(source))
            read = reader.begin_read(readable.metadata(), memwire.Descriptor(target))
            assert await read.wait_for_completion(timeout=10) == memwire.OperationStatus.COMPLETE
            readable.close()
        selector.select = select

    asyncio.run(main())
    assert target == source
    return polls[0]


def test_small_reads_mostly_end_without_a_loop_wakeup(monkeypatch):
    # The mechanism, not this machine's latency: a read that ends within the watch needs no
    # wake-up. The default watch (20 us, tuned in bench/python_overhead) is shorter than a
    # round trip whenever the owner's and the reader's threads share a core, which on two
    # CPUs happens run by run (170 or 780 wake-ups for the same 300 reads), so here the watch
    # is long enough for any read on an idle or loaded machine.
    assert memwire.connector.SPIN_MICROSECONDS > 0
    monkeypatch.setattr(memwire.connector, "SPIN_MICROSECONDS", 5000)
    wakeups = count_loop_wakeups(300)
    # Without watching it is 2 a read (600).
    assert wakeups < 150, f"{wakeups} loop wake-ups for 300 small reads (without watching: 2 a read)"


def test_without_watching_every_wait_wakes_the_loop(monkeypatch):
    monkeypatch.setattr(memwire.connector, "SPIN_MICROSECONDS", 0)
    assert count_loop_wakeups(100) >= 100


def test_waits_begun_while_others_are_pending_do_not_each_hold_the_loop(monkeypatch):
    # Ten readables, waited for together, then read: had each wait watched its operation in
    # turn (as a fan-in's 64 reads did, 20 us each), the reader would start only after ten
    # watches; only the first wait, alone on the loop, watches.
    watch_seconds = 0.05
    monkeypatch.setattr(memwire.connector, "SPIN_MICROSECONDS", int(watch_seconds * 1e6))
    owner, reader = memwire.Connector(), memwire.Connector()
    sources = [bytearray(bytes([i]) * 4096) for i in range(10)]
    targets = [bytearray(4096) for _ in sources]

    async def main():
        readables = [owner.create_readable(memwire.Descriptor(source)) for source in sources]
        loop = asyncio.get_running_loop()
        started = loop.time()
        reads_began = []

        async def read_all():
            reads_began.append(loop.time() - started)
            for readable, target in zip(readables, targets):
                read = reader.begin_read(readable.metadata(), memwire.Descriptor(target))
                await read.wait_for_completion(timeout=10)

        waits = [readable.wait_for_completion(timeout=10) for readable in readables]
        await asyncio.gather(*waits, read_all())
        for readable in readables:
            readable.close()
        return reads_began[0]

    began_after = asyncio.run(main())
    assert targets == sources
    assert began_after < 5 * watch_seconds, (
        f"the reads began {began_after * 1e3:.0f} ms in: the pending waits each watched "
        f"({watch_seconds * 1e3:.0f} ms each)")
