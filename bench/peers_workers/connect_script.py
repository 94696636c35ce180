"""The same script against Dynamo's nixl_connect and memwire's drop-in: only the import differs.

    connect_script.py MODULE owner|reader SIZE COUNT FORM METADATA_FD READY_FD

MODULE is dynamo.nixl_connect or memwire; FORM is "with" (nixl_connect's documented form: each
operation in a ``with`` block, ended when its block is) or "keep" (each operation kept until
the next one replaces it, as a loop that never ends them does). Per operation:
1. the reader clears its target (a CPU torch tensor) and writes "ready" to READY_FD;
2. the owner, on "ready", starts its clock, makes a readable of SIZE bytes (a torch tensor
   whose bytes change every operation), writes its metadata as a line of JSON to METADATA_FD
   and waits for its completion; its clock stops when the wait (and, in the with form, the
   block) has ended;
3. the reader, on the line, starts its clock, parses the metadata, reads the whole readable and
   waits for its completion (and its block's end); its clock stops there;
4. outside both clocks, the reader checks every byte against what the owner wrote for this
   operation (the same seeded generator), before clearing the target for the next one.
Both use the API as nixl_connect's users do (Descriptor of a tensor, create_readable /
begin_read, metadata().model_dump_json(), RdmaMetadata.model_validate_json, await
wait_for_completion()). Each side prints one line of JSON on stdout: {"seconds": [...]} (every
operation, the first a warm-up) or {"error": "..."}.
"""

import asyncio
import importlib
import json
import os
import sys
import time
import traceback

import torch


def content(size, index):
    """What operation ``index`` moves: different bytes each time, the same on both sides."""
    return torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(index + 1))


async def owner(connect, size, count, form, metadata_fd, ready):
    connector = connect.Connector()
    await connector.initialize()
    source = torch.empty(size, dtype=torch.uint8)
    seconds, kept = [], None
    for index in range(count):
        source.copy_(content(size, index))
        if ready.readline() != "ready\n":
            return {"error": "the reader stopped"}
        start = time.perf_counter()
        if form == "with":
            with await connector.create_readable(connect.Descriptor(source)) as readable:
                os.write(metadata_fd, (readable.metadata().model_dump_json() + "\n").encode())
                await readable.wait_for_completion()
        else:
            kept = await connector.create_readable(connect.Descriptor(source))
            os.write(metadata_fd, (kept.metadata().model_dump_json() + "\n").encode())
            await kept.wait_for_completion()
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds}


async def reader(connect, size, count, form, metadata, ready_fd):
    connector = connect.Connector()
    await connector.initialize()
    target = torch.empty(size, dtype=torch.uint8)
    seconds, kept = [], None
    for index in range(count):
        target.zero_()
        os.write(ready_fd, b"ready\n")
        line = metadata.readline()
        start = time.perf_counter()
        remote = connect.RdmaMetadata.model_validate_json(line)
        if form == "with":
            with await connector.begin_read(remote, connect.Descriptor(target)) as read:
                await read.wait_for_completion()
        else:
            kept = await connector.begin_read(remote, connect.Descriptor(target))
            await kept.wait_for_completion()
        seconds.append(time.perf_counter() - start)
        if not torch.equal(target, content(size, index)):
            return {"error": f"operation {index}: the bytes read differ from the owner's"}
    return {"seconds": seconds}


def main():
    module, role, size, count, form = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    metadata_fd, ready_fd = int(sys.argv[6]), int(sys.argv[7])
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the libraries' prints go to the log, the result line to the driver
    try:
        if form not in ("with", "keep"):
            raise ValueError(f"FORM is with or keep, not {form!r}")
        connect = importlib.import_module(module)
        if role == "owner":
            result = asyncio.run(owner(connect, size, count, form, metadata_fd, os.fdopen(ready_fd, "r")))
        else:
            result = asyncio.run(reader(connect, size, count, form, os.fdopen(metadata_fd, "r"), ready_fd))
    except Exception as error:  # reported to the driver, which prints it in the row
        traceback.print_exc()
        result = {"error": f"{type(error).__name__}: {error}"}
    protocol.write(json.dumps(result) + "\n")
    protocol.flush()


if __name__ == "__main__":
    main()
