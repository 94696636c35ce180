"""The other process of the two-process tests: one operation, driven by arguments, metadata on
stdin/stdout (one JSON line each way), a result line at the end.

    peer.py ROLE KIND SIZE SEED [DESCS]
      ROLE readable|writable: prints the metadata, waits, prints "done STATUS CHECK"
      ROLE read|write: reads the remote metadata from stdin, starts the transfer, prints "begun",
        and at the end "done STATUS CHECK"
      KIND numpy|torch|bytearray; the data is pattern(SEED, SIZE) split into DESCS descriptors.
      CHECK: "ok" when the local bytes equal the pattern byte for byte (after receiving), or
      "-" (when sending), else "mismatch@INDEX".
"""

import asyncio
import sys

import numpy as np

import memwire


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def make_buffers(kind, size, seed, descs, fill):
    data = pattern(seed, size) if fill else np.zeros(size, dtype=np.uint8)
    pieces = np.array_split(data, descs)
    if kind == "numpy":
        buffers = [p.copy() for p in pieces]
    elif kind == "torch":
        import torch

        # float32 tensors where the size allows: the bytes, not the values, must match.
        buffers = []
        for p in pieces:
            t = torch.from_numpy(p.copy())
            buffers.append(t.view(torch.float32) if p.size % 4 == 0 else t)
    elif kind == "bytearray":
        buffers = [bytearray(p.tobytes()) for p in pieces]
    else:
        raise SystemExit(f"unknown kind {kind}")
    return buffers


def as_bytes(buffer):
    if hasattr(buffer, "numpy"):
        return buffer.contiguous().view(-1).numpy().view(np.uint8).tobytes()
    return bytes(memoryview(buffer).cast("B"))


def check(buffers, seed, size):
    got = np.frombuffer(b"".join(as_bytes(b) for b in buffers), dtype=np.uint8)
    want = pattern(seed, size)
    if got.size != want.size:
        return f"size{got.size}"
    bad = np.nonzero(got != want)[0]
    return "ok" if bad.size == 0 else f"mismatch@{bad[0]}"


async def main():
    role, kind, size, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    descs = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    connector = memwire.Connector()
    sending = role in ("readable", "write")
    buffers = make_buffers(kind, size, seed, descs, fill=sending)
    descriptors = [memwire.Descriptor(b) for b in buffers]
    if role in ("readable", "writable"):
        create = connector.create_readable if role == "readable" else connector.create_writable
        async with await create(descriptors) as op:
            print(op.metadata().to_json(), flush=True)
            status = await op.wait_for_completion(timeout=60)
    else:
        remote = memwire.RdmaMetadata.from_json(sys.stdin.readline())
        if role == "read":
            op = await connector.begin_read(remote, descriptors)
        else:
            op = await connector.begin_write(descriptors, remote)
        print("begun", flush=True)
        status = await op.wait_for_completion(timeout=60)
    result = "-" if sending else check(buffers, seed, size)
    print(f"done {status.name} {result} {op.transport}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
