"""Python's cost over C++, measured in the same run against the same passive peer.

    bench/python_overhead/overhead.py BUILD_DIR [--transport shm|tcp] [--rounds 3]
        [--samples 2000] [--warmup 200] [--trials 5] [--json FILE]

Both drivers talk to bench's transfer_peer (the passive side, C++) over its line protocol:
- 4 KiB READ round trip: one READ at a time, from begin_read until both sides reported
  complete (the peer's "c" line), median over samples; the C++ figure is transfer_bench
  latency (the same measurement), the Python one awaits memwire's async API.
- 16 MiB READ throughput: batches of 16 READs of 16 MiB, one in flight (conc 1), timed from
  the first begin_read until the peer reported the batch done; median over trials; C++:
  transfer_bench throughput --conc 1 --descs 1.
Rounds alternate C++ and Python so that a noisy neighbour hits both; the figure per side is the
median over rounds. Ratios: python/C++ for the round trip (target <= 1.5), python/C++ for
throughput (target >= 0.95).
"""

import argparse
import asyncio
import json
import mmap
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SIZE_RTT = 4096
SIZE_BULK = 16 << 20
TARGET_BYTES = 256 << 20


def page_buffer(size):
    """Private anonymous pages, as the C++ driver's PageBuffer: same alignment, same THP."""
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    array = np.frombuffer(memory, dtype=np.uint8)
    array[:] = 0  # touch every page before timing
    return array


class Peer:
    def __init__(self, binary, transport):
        self.process = subprocess.Popen(
            [binary, "--transport", transport, "--memory", "plain"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        hello = self.line()
        if not hello.startswith("ready"):
            raise SystemExit(f"transfer_peer: {hello}")

    def send(self, text):
        self.process.stdin.write(text.encode() + b"\n")
        self.process.stdin.flush()

    def line(self):
        raw = self.process.stdout.readline()
        if not raw:
            raise SystemExit("transfer_peer exited")
        text = raw.decode().rstrip("\n")
        if text.startswith("error"):
            raise SystemExit(f"transfer_peer: {text}")
        return text

    def publish(self, count, each):
        self.send(f"publish readable {count} {'each' if each else 'all'}")
        return [self.line() for _ in range(count)]

    def done(self):
        words = self.line().split()
        if words[0] != "done" or words[1] != "0":
            raise SystemExit(f"peer reported failures: {words}")

    def close(self):
        try:
            self.send("quit")
            self.process.wait(10)
        except Exception:
            self.process.kill()
            self.process.wait(10)


async def python_latency(memwire, peer, transport, samples, warmup):
    connector = memwire.Connector(transports=[transport])
    peer.send(f"alloc {SIZE_RTT} 1 1 1")
    peer.line()
    local = page_buffer(SIZE_RTT)
    descriptors = [memwire.Descriptor(local)]
    total = samples + warmup
    metadata = [memwire.RdmaMetadata.from_json(text) for text in peer.publish(total, each=True)]
    times = []
    used = ""
    for i in range(total):
        start = time.perf_counter()
        op = await connector.begin_read(metadata[i], descriptors)
        await op.wait_for_completion(timeout=120)
        if peer.line() != "c":
            raise SystemExit("peer did not report completion")
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed * 1e6)
        used = used or op.transport
    peer.done()
    return statistics.median(times), used


async def python_throughput(memwire, peer, transport, trials):
    connector = memwire.Connector(transports=[transport])
    peer.send(f"alloc {SIZE_BULK} 1 1 1")
    peer.line()
    local = page_buffer(SIZE_BULK)
    descriptors = [memwire.Descriptor(local)]
    count = TARGET_BYTES // SIZE_BULK

    async def batch(n):
        metadata = [memwire.RdmaMetadata.from_json(text) for text in peer.publish(n, each=False)]
        start = time.perf_counter()
        for md in metadata:
            op = await connector.begin_read(md, descriptors)
            await op.wait_for_completion(timeout=120)
        peer.done()
        return time.perf_counter() - start

    await batch(1)  # warm-up: connections, caches
    if not local.any():
        raise SystemExit("the warm-up read left the buffer empty")
    rates = [count * SIZE_BULK / await batch(count) / 1e9 for _ in range(trials)]
    return statistics.median(rates)


def print_result(result, json_path):
    """Prints the result as one JSON line, and writes it to json_path (--json) when given."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))


def cpp(bench, args):
    out = subprocess.run([bench] + args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"transfer_bench failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--transport", default="shm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"],
                        help="the event loop the Python side runs on (uvloop: Debian python3-uvloop)")
    parser.add_argument("--json")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    import memwire

    if args.loop == "uvloop":
        import uvloop

        run_loop = uvloop.run if hasattr(uvloop, "run") else (lambda coro: (uvloop.install(), asyncio.run(coro))[1])
    else:
        run_loop = asyncio.run
    bench = os.path.join(build, "bench", "transfer_bench")
    peer_binary = os.path.join(build, "bench", "transfer_peer")
    rtt = {"cpp": [], "python": []}
    bulk = {"cpp": [], "python": []}
    for round_index in range(args.rounds):
        report = cpp(bench, ["latency", "--transport", args.transport, "--sizes", "4K",
                             "--samples", str(args.samples), "--warmup", str(args.warmup)])
        rtt["cpp"].append(report["results"][0]["us"]["p50"])
        report = cpp(bench, ["throughput", "--transport", args.transport, "--ops", "read", "--sizes", "16M",
                             "--descs", "1", "--conc", "1", "--trials", str(args.trials)])
        bulk["cpp"].append(report["results"][0]["gbps"]["median"])

        peer = Peer(peer_binary, args.transport)
        try:
            us, used = run_loop(python_latency(memwire, peer, args.transport, args.samples, args.warmup))
            rtt["python"].append(us)
            gbps = run_loop(python_throughput(memwire, peer, args.transport, args.trials))
            bulk["python"].append(gbps)
        finally:
            peer.close()
        print(f"round {round_index + 1}: 4K READ p50 C++ {rtt['cpp'][-1]:.1f} us, Python {rtt['python'][-1]:.1f} us; "
              f"16M READ C++ {bulk['cpp'][-1]:.2f} GB/s, Python {bulk['python'][-1]:.2f} GB/s ({used})", flush=True)

    result = {
        "transport": args.transport,
        "loop": args.loop,
        "rounds": args.rounds,
        "rtt_4k_us": {side: statistics.median(v) for side, v in rtt.items()},
        "read_16m_gbps": {side: statistics.median(v) for side, v in bulk.items()},
        "raw": {"rtt_4k_us": rtt, "read_16m_gbps": bulk},
    }
    result["rtt_ratio"] = result["rtt_4k_us"]["python"] / result["rtt_4k_us"]["cpp"]
    result["throughput_ratio"] = result["read_16m_gbps"]["python"] / result["read_16m_gbps"]["cpp"]
    result["targets_met"] = result["rtt_ratio"] <= 1.5 and result["throughput_ratio"] >= 0.95
    print(
        f"{args.transport} ({args.loop}): 4 KiB READ round trip p50 C++ {result['rtt_4k_us']['cpp']:.1f} us, "
        f"Python {result['rtt_4k_us']['python']:.1f} us (x{result['rtt_ratio']:.2f}, target <= 1.5); "
        f"16 MiB READ C++ {result['read_16m_gbps']['cpp']:.2f} GB/s, Python {result['read_16m_gbps']['python']:.2f} GB/s "
        f"(x{result['throughput_ratio']:.2f}, target >= 0.95)"
    )
    print_result(result, args.json)


if __name__ == "__main__":
    main()
