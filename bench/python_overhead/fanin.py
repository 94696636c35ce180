"""Fan-in through the Python binding, as issue 22's table was measured: one reader, N owner
processes, 1 MiB each, every round.

    bench/python_overhead/fanin.py BUILD_DIR [--transport tcp] [--owners 1,8,32,64]
        [--rounds 30] [--warmup 3] [--json FILE]

The owners are bench's transfer_peer (C++): each round each one makes a fresh readable of its
1 MiB buffer, hands its metadata over its pipe and waits on it. The reader (this process, the
asyncio API) begins all N reads at once and awaits them; a round ends when every owner saw its
readable complete (its "c" line), as `transfer_bench fanin` times it. Reader threads: this
process's, with every connection live. The last line is the result as JSON.
"""

import argparse
import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import Peer, page_buffer, print_result  # noqa: E402

SIZE = 1 << 20


def reader_threads():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def percentile(values, q):
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


async def fan_in(memwire, peers, transport, rounds, warmup):
    connector = memwire.Connector(transports=[transport])
    buffers = [page_buffer(SIZE) for _ in peers]
    descriptors = [[memwire.Descriptor(buffer)] for buffer in buffers]
    times, threads = [], 0
    for round_index in range(warmup + rounds):
        metadata = [memwire.RdmaMetadata.from_json(peer.publish(1, each=True)[0]) for peer in peers]
        start = time.perf_counter()
        reads = [await connector.begin_read(md, local) for md, local in zip(metadata, descriptors)]
        await asyncio.gather(*(read.wait_for_completion(timeout=120) for read in reads))
        for peer in peers:
            if peer.line() != "c":
                raise SystemExit("an owner did not report completion")
            peer.done()
        if round_index >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
        threads = max(threads, reader_threads())
    return times, threads


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--owners", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    import memwire

    peer_binary = os.path.join(build, "bench", "transfer_peer")
    results = []
    for owners in (int(n) for n in args.owners.split(",")):
        peers = [Peer(peer_binary, args.transport) for _ in range(owners)]
        try:
            for peer in peers:
                peer.send(f"alloc {SIZE} 1 1 1")
                peer.line()
            times, threads = asyncio.run(fan_in(memwire, peers, args.transport, args.rounds,
                                                args.warmup))
        finally:
            for peer in peers:
                peer.close()
        p50 = statistics.median(times)
        entry = {"owners": owners, "size": SIZE, "rounds": len(times), "reader_threads": threads,
                 "round_ms": {"p50": p50, "p99": percentile(times, 0.99), "max": max(times)},
                 "aggregate_gbps": SIZE * owners / (p50 / 1e3) / 1e9}
        results.append(entry)
        print(f"python {args.transport} fan-in owners={owners:<4} reader threads {threads:3}  "
              f"round p50 {p50:8.2f} ms  p99 {entry['round_ms']['p99']:8.2f} ms  "
              f"aggregate {entry['aggregate_gbps']:.2f} GB/s", flush=True)
    result = {"transport": args.transport, "fanin": results}
    print_result(result, args.json)


if __name__ == "__main__":
    main()
