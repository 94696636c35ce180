"""memwire through its Python binding (PYTHONPATH = BUILD/python), blocking waits (no asyncio):
pools registered once (the peers' model: register once, read many; the scattered READ carries a
tag) and one-shot readables (a fresh registration per READ: published before the clock starts, or
made by the owner when the reader asks, inside both clocks)."""

import json
import os
import time

import memwire

from worker import BLOCK_BYTES, PATTERN_SIZES, SCATTERED, SCATTERED_COUNT, scattered_blocks

TAG = "blocks-read"
WAIT_SECONDS = 60


def finish(operation):
    status = operation.wait(timeout=WAIT_SECONDS)
    if status != memwire.OperationStatus.COMPLETE:
        raise RuntimeError(f"memwire operation {status}: {operation.error_message}")


class Side:
    def __init__(self, transport):
        # MEMWIRE_BENCH_SHM_DIRECT=1: peers of our user read our pools themselves (an owner's
        # opt-in, ShmOptions::direct_reads).
        direct = os.environ.get("MEMWIRE_BENCH_SHM_DIRECT") == "1"
        self.connector = memwire.Connector(transports=[transport], environment=False,
                                           shm_direct_reads=direct)
        self.readables = []

    def _register(self, buffer):
        # One pool per contiguous size (one block of that size) and one of 16 KiB blocks.
        self.buffer = buffer
        self.pools = {name: self.connector.register_pool((buffer[:size], size))
                      for name, size in PATTERN_SIZES.items()}
        self.pools[SCATTERED] = self.connector.register_pool((buffer, BLOCK_BYTES))
        return json.dumps({name: pool.metadata.to_json() for name, pool in self.pools.items()})

    def owner_start(self, buffer):
        return self._register(buffer)

    def owner_add_peer(self, metadata):
        pass

    def owner_publish(self, size, count):
        for readable in self.readables:  # the previous trial's, all read by now
            readable.close()
        self.readables = [self.connector.create_readable(memwire.Descriptor(self.buffer[:size]))
                          for _ in range(count)]
        return [r.metadata().to_json() for r in self.readables]

    def owner_fresh(self, size):
        """A readable made now (inside the owner's clock): its metadata, and how to await its end."""
        readable = self.connector.create_readable(memwire.Descriptor(self.buffer[:size]))

        def wait():
            finish(readable)
            readable.close()
        return readable.metadata().to_json(), wait

    def owner_serve(self, stop):
        # memwire serves on its own threads: the owner only waits for the next command.
        while not stop():
            time.sleep(0.001)

    def owner_notes(self, expected, deadline):
        pool, received = self.pools[SCATTERED], 0
        while received < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                if pool.next_notification(timeout=left).tag == TAG:
                    received += 1
            except TimeoutError:
                break
        return received

    def reader_start(self, buffer, owner_metadata, owner_address):
        own = self._register(buffer)
        self.remote = {name: memwire.PoolMetadata.from_json(text)
                       for name, text in json.loads(owner_metadata).items()}
        return own

    def reader_prepare(self, pattern, published):
        if published is not None:  # one-shot: each call reads the next published readable
            remaining = [memwire.RdmaMetadata.from_json(text) for text in published]
            local = [memwire.Descriptor(self.buffer[:PATTERN_SIZES[pattern]])]

            def read_one_shot():
                finish(self.connector.begin_read(remaining.pop(0), local))
            return read_one_shot
        remote, pool = self.remote[pattern], self.pools[pattern]
        if pattern == SCATTERED:
            pairs, tag = [(b, i) for i, b in enumerate(scattered_blocks())], TAG
        else:
            pairs, tag = [(0, 0)], ""

        def read_blocks():
            finish(self.connector.read_blocks(remote, pairs, pool, tag=tag))
        return read_blocks

    def reader_fresh(self, pattern, metadata):
        local = [memwire.Descriptor(self.buffer[:PATTERN_SIZES[pattern]])]
        finish(self.connector.begin_read(memwire.RdmaMetadata.from_json(metadata), local))

    def close(self):
        for readable in self.readables:
            readable.close()
        for pool in self.pools.values():
            pool.close()
