"""The same script against Dynamo's nixl_connect and memwire's drop-in: only the import differs.

    connect_script.py MODULE owner|reader SIZE COUNT PIPE_FD

MODULE is dynamo.nixl_connect or memwire. The owner makes a readable of SIZE bytes of CPU memory
(a torch tensor) COUNT times, writes each one's metadata as a line of JSON to PIPE_FD, and waits
for its completion; the reader reads each line from PIPE_FD, reads the whole readable and waits
for its completion. Both use the API as nixl_connect's users do (Descriptor of a tensor,
create_readable / begin_read, metadata().model_dump_json(), RdmaMetadata.model_validate_json,
await wait_for_completion()). An operation's time is the owner's, from create_readable until its
wait returned: the whole exchange a worker pays per transfer. The owner prints one line of JSON
on stdout: {"seconds": [...]} (every operation, the first a warm-up) or {"error": "..."}; the
reader checks the first read's bytes and prints {"ok": true} or {"error": "..."}.
"""

import asyncio
import importlib
import json
import os
import sys
import time
import traceback

import torch


async def owner(connect, size, count, pipe):
    connector = connect.Connector()
    await connector.initialize()
    source = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        readable = await connector.create_readable(connect.Descriptor(source))
        line = readable.metadata().model_dump_json() + "\n"
        os.write(pipe, line.encode())
        await readable.wait_for_completion()
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds}


async def reader(connect, size, count, pipe):
    connector = connect.Connector()
    await connector.initialize()
    target = torch.zeros(size, dtype=torch.uint8)
    expected = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    lines = os.fdopen(pipe, "r")
    for index in range(count):
        metadata = connect.RdmaMetadata.model_validate_json(lines.readline())
        read = await connector.begin_read(metadata, connect.Descriptor(target))
        await read.wait_for_completion()
        if index == 0 and not torch.equal(target, expected):
            return {"error": "the first read's bytes differ from the owner's"}
        if index == 0:
            target.zero_()  # the next reads must bring the bytes again
    return {"ok": True}


def main():
    module, role, size, count, pipe = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the libraries' prints go to the log, the result line to the driver
    try:
        connect = importlib.import_module(module)
        run = owner if role == "owner" else reader
        result = asyncio.run(run(connect, size, count, pipe))
    except Exception as error:  # reported to the driver, which prints it in the row
        traceback.print_exc()
        result = {"error": f"{type(error).__name__}: {error}"}
    protocol.write(json.dumps(result) + "\n")
    protocol.flush()


if __name__ == "__main__":
    main()
