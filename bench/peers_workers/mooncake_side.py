"""Mooncake transfer engine (PyPI mooncake-transfer-engine-non-cuda), tcp protocol, P2P handshake
(no metadata server: a peer is named by host:rpc_port)."""

import json
import time

from mooncake.engine import TransferEngine

from worker import BLOCK_BYTES, PATTERN_SIZES, SCATTERED, SCATTERED_COUNT, address, scattered_blocks


class Side:
    def __init__(self, transport):
        self.engine = TransferEngine()
        status = self.engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
        if status != 0:
            raise RuntimeError(f"TransferEngine.initialize returned {status}")

    def _register(self, buffer):
        self.buffer = buffer
        status = self.engine.register_memory(address(buffer), buffer.nbytes)
        if status != 0:
            raise RuntimeError(f"register_memory returned {status}")
        return json.dumps({"host": f"127.0.0.1:{self.engine.get_rpc_port()}"})

    def owner_start(self, buffer):
        return self._register(buffer)

    def owner_add_peer(self, metadata):
        pass

    def owner_serve(self, stop):
        # The engine serves READs on its own threads: the owner only waits for the next command.
        while not stop():
            time.sleep(0.001)

    def owner_notes(self, expected, deadline):
        return 0  # batch reads carry no notification in this Python API (see bench/README.md)

    def reader_start(self, buffer, owner_metadata, owner_address):
        own = self._register(buffer)
        self.owner = json.loads(owner_metadata)["host"]
        self.remote_base = owner_address
        return own

    def reader_prepare(self, pattern, published):
        local_base, remote_base = address(self.buffer), self.remote_base
        if pattern == SCATTERED:
            local = [local_base + i * BLOCK_BYTES for i in range(SCATTERED_COUNT)]
            remote = [remote_base + b * BLOCK_BYTES for b in scattered_blocks()]
            lengths = [BLOCK_BYTES] * SCATTERED_COUNT

            def read():
                status = self.engine.batch_transfer_sync_read(self.owner, local, remote, lengths)
                if status != 0:
                    raise RuntimeError(f"batch_transfer_sync_read returned {status}")
            return read
        size = PATTERN_SIZES[pattern]

        def read():
            status = self.engine.transfer_sync_read(self.owner, local_base, remote_base, size)
            if status != 0:
                raise RuntimeError(f"transfer_sync_read returned {status}")
        return read

    def close(self):
        pass
