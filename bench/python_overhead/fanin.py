"""Fan-in through the Python binding, as issue 22's table was measured: one reader, N owner
processes, 1 MiB each, every round; against the raw fan-in and the C++ reader in the same run.

    bench/python_overhead/fanin.py BUILD_DIR [--transport tcp] [--owners 1,8,32,64]
        [--rounds 30] [--warmup 3] [--repeats 1] [--no-baselines] [--json FILE]

The owners are bench's transfer_peer (C++): each round each one makes a fresh readable of its
1 MiB buffer, hands its metadata over its pipe and waits on it. The reader (this process, the
asyncio API) begins all N reads at once and awaits them; a round ends when every owner saw its
readable complete (its "c" line), as `transfer_bench fanin` times it. Reader threads: this
process's, with every connection live.

Issue 35's target is memwire's fan-in >= 0.9x the raw one of the same run: unless
--no-baselines, each repeat runs, in turn, bench's fanin_raw (one epoll thread reading N owner
processes over loopback TCP), `transfer_bench fanin` (the C++ reader) and this Python reader,
each with the same owners, size and rounds; per owner count the figure of each is the median of
its repeats' round p50s, and the ratios are raw p50 / memwire p50 (> 0.9 meets the target).
The last line is the result as JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
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


def baseline(program, args):
    """The JSON entry of one owner count from a C++ fan-in program (its last line)."""
    out = subprocess.run([program] + args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{os.path.basename(program)} failed: {out.stderr[-2000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    entries = report.get("fanin_raw") or report.get("results") or []
    if len(entries) != 1 or "round_ms" not in entries[0]:
        raise SystemExit(f"{os.path.basename(program)}: no fan-in figure in {report}")
    return entries[0]


def python_fan_in(memwire, peer_binary, transport, owners, rounds, warmup):
    peers = [Peer(peer_binary, transport) for _ in range(owners)]
    try:
        for peer in peers:
            peer.send(f"alloc {SIZE} 1 1 1")
            peer.line()
        times, threads = asyncio.run(fan_in(memwire, peers, transport, rounds, warmup))
    finally:
        for peer in peers:
            peer.close()
    p50 = statistics.median(times)
    return {"owners": owners, "size": SIZE, "rounds": len(times), "reader_threads": threads,
            "round_ms": {"p50": p50, "p99": percentile(times, 0.99), "max": max(times)},
            "aggregate_gbps": SIZE * owners / (p50 / 1e3) / 1e9}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--owners", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.repeats < 1 or args.rounds < 1:
        raise SystemExit("--repeats and --rounds must be at least 1")
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    import memwire

    bench = os.path.join(build, "bench")
    peer_binary = os.path.join(bench, "transfer_peer")
    shape = ["--warmup", str(args.warmup)]
    results = []
    for owners in (int(n) for n in args.owners.split(",")):
        runs = {"raw": [], "cpp": [], "python": []}
        for _ in range(args.repeats):
            if not args.no_baselines:
                runs["raw"].append(baseline(os.path.join(bench, "fanin_raw"), [
                    "--owners", str(owners), "--size", "1M", "--rounds", str(args.rounds)]
                    + shape))
                runs["cpp"].append(baseline(os.path.join(bench, "transfer_bench"), [
                    "fanin", "--transport", args.transport, "--owners", str(owners),
                    "--sizes", "1M", "--samples", str(args.rounds)] + shape))
            runs["python"].append(python_fan_in(memwire, peer_binary, args.transport, owners,
                                                args.rounds, args.warmup))
        entry = dict(runs["python"][-1])
        entry["round_ms"] = dict(entry["round_ms"],
                                 p50=statistics.median(r["round_ms"]["p50"] for r in runs["python"]))
        entry["aggregate_gbps"] = SIZE * owners / (entry["round_ms"]["p50"] / 1e3) / 1e9
        line = (f"python {args.transport} fan-in owners={owners:<4} reader threads "
                f"{entry['reader_threads']:3}  round p50 {entry['round_ms']['p50']:8.2f} ms  "
                f"aggregate {entry['aggregate_gbps']:.2f} GB/s")
        if not args.no_baselines:
            p50 = {name: statistics.median(r["round_ms"]["p50"] for r in runs[name])
                   for name in runs}
            entry["same_run"] = {"repeats": args.repeats,
                                 "round_p50_ms": p50,
                                 "round_p50_ms_each": {name: [r["round_ms"]["p50"] for r in runs[name]]
                                                       for name in runs},
                                 "python_vs_raw": p50["raw"] / p50["python"],
                                 "cpp_vs_raw": p50["raw"] / p50["cpp"]}
            line += (f"; raw p50 {p50['raw']:.2f} ms, C++ {p50['cpp']:.2f} ms: python "
                     f"{entry['same_run']['python_vs_raw']:.2f}x raw, C++ "
                     f"{entry['same_run']['cpp_vs_raw']:.2f}x raw")
        results.append(entry)
        print(line, flush=True)
    result = {"transport": args.transport, "fanin": results}
    print_result(result, args.json)


if __name__ == "__main__":
    main()
