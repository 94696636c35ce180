"""NIXL agent (PyPI nixl-cu12), UCX backend; UCX_TLS (tcp or sm) comes from the environment."""

import os
import time
import uuid

from nixl_cu12._api import nixl_agent, nixl_agent_config

from worker import BLOCK_BYTES, PATTERN_SIZES, SCATTERED, SCATTERED_COUNT, address, scattered_blocks

NOTIFICATION = b"blocks-read"


class Side:
    def __init__(self, transport):
        # The progress thread is NIXL's default (MEMWIRE_BENCH_NIXL_PROGRESS=0: off, the rows
        # "...-noprogress"); the owner also polls notifications while serving.
        progress = os.environ.get("MEMWIRE_BENCH_NIXL_PROGRESS", "1") != "0"
        self.agent = nixl_agent(f"bench-{uuid.uuid4().hex[:8]}",
                                nixl_agent_config(enable_prog_thread=progress, backends=["UCX"]))
        self.received = 0

    def _register(self, buffer):
        self.buffer = buffer
        self.agent.register_memory([(address(buffer), buffer.nbytes, 0, "")], "DRAM")
        return self.agent.get_agent_metadata()

    def owner_start(self, buffer):
        return self._register(buffer)

    def owner_add_peer(self, metadata):
        self.agent.add_remote_agent(metadata)

    def owner_serve(self, stop):
        while not stop():
            for messages in self.agent.get_new_notifs().values():
                self.received += sum(1 for m in messages if m == NOTIFICATION)

    def owner_notes(self, expected, deadline):
        while self.received < expected and time.monotonic() < deadline:
            for messages in self.agent.get_new_notifs().values():
                self.received += sum(1 for m in messages if m == NOTIFICATION)
        received, self.received = self.received, 0
        return received

    def reader_start(self, buffer, owner_metadata, owner_address):
        own = self._register(buffer)
        self.owner = self.agent.add_remote_agent(owner_metadata)
        self.remote_base = owner_address
        return own

    def reader_prepare(self, pattern, published):
        local_base = address(self.buffer)
        remote_base = self.remote_base
        if pattern == SCATTERED:
            local = [(local_base + i * BLOCK_BYTES, BLOCK_BYTES, 0) for i in range(SCATTERED_COUNT)]
            remote = [(remote_base + b * BLOCK_BYTES, BLOCK_BYTES, 0) for b in scattered_blocks()]
            message = NOTIFICATION
        else:
            size = PATTERN_SIZES[pattern]
            local, remote, message = [(local_base, size, 0)], [(remote_base, size, 0)], b""
        handle = self.agent.initialize_xfer(
            "READ", self.agent.get_xfer_descs(local, "DRAM"), self.agent.get_xfer_descs(remote, "DRAM"),
            self.owner, message)

        def read():  # one prepared request, posted again for every READ
            state = self.agent.transfer(handle)
            while state == "PROC":
                state = self.agent.check_xfer_state(handle)
            if state != "DONE":
                raise RuntimeError(f"NIXL transfer state {state}")
        return read

    def close(self):
        pass
