"""One process of a two-process comparison run by bench/peers: the owner or the reader.

    worker.py SYSTEM owner|reader [--transport tcp|shm]

SYSTEM is nixl, mooncake or memwire (a module SYSTEM_side.py beside this file). Lines on
stdin/stdout, base64 where they carry bytes; logs go to stderr:
  owner:  prints "meta B64"; then "peer B64" (the reader's metadata) -> "ok";
          "publish SIZE COUNT" -> "meta B64" (memwire one-shot readables, a JSON list);
          "fresh SIZE COUNT" -> "fresh {json}": COUNT times, on the reader's byte on the fresh
          pipe, makes a readable of SIZE (SIZE 0: none, the pipe's floor), writes its metadata
          there and waits for its end: the owner's clock, registration included;
          "serve" -> "serving", then drives the system's progress until the next line;
          "notes N" -> "notes M" (notifications received since the last "notes", waiting up
          to 10 s for N); "quit".
  reader: reads "meta B64" (the owner's), prints "meta B64" (its own);
          "run PATTERN ITERS [B64]" -> "result {json}" (seconds per operation) or "error TEXT";
          "fresh PATTERN ITERS" -> "result {json}": each READ asks the owner for a fresh readable
          on the fresh pipe (PATTERN "pipe": the ask and the answer alone);
Every operation's target is cleared before it and checked after it, outside the clock.
          "quit".
Every failure is reported as an "error" line (the driver records it, never a figure).
"""

import argparse
import base64
import importlib
import json
import mmap
import os
import select
import sys
import time
import traceback

import numpy as np

BUFFER_BYTES = 64 << 20
BLOCK_BYTES = 16 << 10
SCATTERED_COUNT = 128
# Contiguous READs read the first SIZE bytes of the owner's buffer into the reader's.
PATTERN_SIZES = {"read-4K": 4 << 10, "read-1M": 1 << 20, "read-64M": 64 << 20}
SCATTERED = "scattered-128x16K"


def scattered_blocks():
    """The same 128 random distinct 16 KiB blocks of the owner's 4096, for every system."""
    rng = np.random.default_rng(7)
    return [int(b) for b in rng.choice(BUFFER_BYTES // BLOCK_BYTES, SCATTERED_COUNT, replace=False)]


def page_buffer():
    """Private anonymous pages, every page touched before timing."""
    memory = mmap.mmap(-1, BUFFER_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    array = np.frombuffer(memory, dtype=np.uint8)
    array[:] = 0
    return array


def owner_pattern():
    return np.random.default_rng(1).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)


def address(array):
    return array.__array_interface__["data"][0]


def encode(raw):
    return base64.b64encode(raw if isinstance(raw, bytes) else raw.encode()).decode()


def decode(text):
    return base64.b64decode(text)


PROTOCOL = None  # the driver's pipe; fd 1 goes to stderr (NIXL logs to stdout)


def say(line):
    PROTOCOL.write(line + "\n")
    PROTOCOL.flush()


def stdin_ready():
    return bool(select.select([sys.stdin], [], [], 0)[0])


def target_of(pattern, local):
    """The part of the reader's buffer an operation of `pattern` fills."""
    if pattern == SCATTERED:
        return local[:SCATTERED_COUNT * BLOCK_BYTES]
    return local[:PATTERN_SIZES[pattern]]


def check_read(pattern, local, expected):
    """After an operation: the reader's buffer holds the owner's bytes."""
    if pattern == SCATTERED:
        for i, block in enumerate(scattered_blocks()):
            got = local[i * BLOCK_BYTES:(i + 1) * BLOCK_BYTES]
            if not np.array_equal(got, expected[block * BLOCK_BYTES:(block + 1) * BLOCK_BYTES]):
                raise RuntimeError(f"block {block} read into local block {i} holds wrong bytes")
    else:
        size = PATTERN_SIZES[pattern]
        if not np.array_equal(local[:size], expected[:size]):
            raise RuntimeError(f"{pattern}: the reader's buffer holds wrong bytes")


def timed_batch(operation, pattern, iterations, buffer, expected):
    """A warm-up operation (connections, caches), then ITERATIONS timed ones: each one's target
    cleared before and its bytes checked after, outside the clock."""
    target = target_of(pattern, buffer)
    seconds = []
    for i in range(iterations + 1):
        target[:] = 0
        start = time.perf_counter()
        operation()
        elapsed = time.perf_counter() - start
        check_read(pattern, buffer, expected)
        if i:
            seconds.append(elapsed)
    return seconds


FRESH = None  # (read end, write end) of the pipes to the other process, for "fresh"


def read_exactly(fd, count):
    data = b""
    while len(data) < count:
        chunk = os.read(fd, count - len(data))
        if not chunk:
            raise RuntimeError("the other process closed the fresh pipe")
        data += chunk
    return data


def ask_fresh():
    """The reader's side of one fresh operation: a byte to the owner, its metadata back."""
    os.write(FRESH[1], b"g")
    length = int.from_bytes(read_exactly(FRESH[0], 4), "little")
    return read_exactly(FRESH[0], length).decode()


def run_fresh(side, pattern, iterations, buffer, expected):
    if pattern == "pipe":  # the ask and the answer alone: the floor under every fresh figure
        seconds = []
        for _ in range(iterations + 1):
            start = time.perf_counter()
            ask_fresh()
            seconds.append(time.perf_counter() - start)
        return seconds[1:]
    return timed_batch(lambda: side.reader_fresh(pattern, ask_fresh()), pattern, iterations, buffer, expected)


def serve_fresh(side, size, count):
    """The owner's side: per ask, a readable made, its metadata sent, its end awaited."""
    seconds = []
    for _ in range(count):
        read_exactly(FRESH[0], 1)
        start = time.perf_counter()
        if size:
            metadata, wait = side.owner_fresh(size)
        else:
            metadata, wait = "", lambda: None
        raw = metadata.encode()
        os.write(FRESH[1], len(raw).to_bytes(4, "little") + raw)
        wait()
        seconds.append(time.perf_counter() - start)
    return seconds[1:]


def run_owner(side):
    buffer = page_buffer()
    buffer[:] = owner_pattern()
    # The owner's buffer address travels beside the system's own metadata (NIXL and Mooncake
    # name remote memory by address).
    own = {"address": address(buffer), "meta": encode(side.owner_start(buffer))}
    say("meta " + encode(json.dumps(own)))
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "peer":
                side.owner_add_peer(decode(words[1]))
                say("ok")
            elif words[0] == "publish":
                say("meta " + encode(json.dumps(side.owner_publish(int(words[1]), int(words[2])))))
            elif words[0] == "fresh":
                say("fresh " + json.dumps({"seconds": serve_fresh(side, int(words[1]), int(words[2]))}))
            elif words[0] == "serve":
                say("serving")
                side.owner_serve(stdin_ready)
            elif words[0] == "notes":
                say(f"notes {side.owner_notes(int(words[1]), deadline=time.monotonic() + 10)}")
            elif words[0] == "quit":
                break
        except Exception as error:  # reported to the driver, which marks the figure failed
            traceback.print_exc(file=sys.stderr)
            say(f"error {type(error).__name__}: {error}".replace("\n", " "))
    side.close()


def run_reader(side):
    words = sys.stdin.readline().split()
    if len(words) != 2 or words[0] != "meta":
        raise SystemExit(f"reader expected the owner's metadata, got {words}")
    buffer = page_buffer()
    expected = owner_pattern()
    owner = json.loads(decode(words[1]))
    say("meta " + encode(side.reader_start(buffer, decode(owner["meta"]), owner["address"])))
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        try:
            pattern, iterations = words[1], int(words[2])
            published = json.loads(decode(words[3])) if len(words) > 3 else None
            if words[0] == "fresh":
                seconds = run_fresh(side, pattern, iterations, buffer, expected)
            else:
                seconds = timed_batch(side.reader_prepare(pattern, published), pattern, iterations, buffer,
                                      expected)
            say("result " + json.dumps({"seconds": seconds}))
        except Exception as error:
            traceback.print_exc(file=sys.stderr)
            say(f"error {type(error).__name__}: {error}".replace("\n", " "))
    side.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("system", choices=["nixl", "mooncake", "memwire"])
    parser.add_argument("role", choices=["owner", "reader"])
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--fresh-fds", nargs=2, type=int, help="read and write ends of the fresh pipes")
    args = parser.parse_args()
    global PROTOCOL, FRESH
    FRESH = args.fresh_fds
    PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    side = importlib.import_module(f"{args.system}_side").Side(args.transport)
    (run_owner if args.role == "owner" else run_reader)(side)


if __name__ == "__main__":
    main()
