#!/usr/bin/env python3
"""The memwire benchmark suite: runs every benchmark program and baseline in one go, prints
the table, writes results/latest.json (+ latest.txt) and draws results/throughput.png.

Run through bench/run, which builds the programs first. Progress goes to stderr, the table to
stdout. Each figure is the median of repeated trials with min-max; latencies are p50/p99.
"""

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20
SIZES = "4K,64K,1M,16M,64M,256M,1G"
UCX_SIZES = [16 * MiB, 64 * MiB]
# Throughput runs: name -> (title, transfer_bench options).
THROUGHPUT_RUNS = {
    "tcp": ("tcp", ["--transport", "tcp"]),
    "shm": ("shm (plain memory: process_vm_readv/writev)", ["--transport", "shm"]),
    "shm-shared": ("shm (the peer's buffers in a SharedBuffer, mapped by the driver)",
                   ["--transport", "shm", "--memory", "shared"]),
}


def log(text):
    print(text, file=sys.stderr, flush=True)


def size_name(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def median(values):
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def summary(values):
    # Same rule as the C++ programs: the sample at index q * (n - 1).
    return {"median": median(values), "min": min(values), "max": max(values)} if values else None


def run_program(argv, timeout, env=None):
    """Runs one benchmark program, echoes its lines as progress, returns its last line's JSON."""
    log("$ " + " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)))
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    # A program that hangs without a word is killed when its time is up.
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if not line.startswith("{"):
            log("    " + line.rstrip())
    process.wait()
    watchdog.cancel()
    if not lines or not lines[-1].startswith("{"):
        return {"error": f"{os.path.basename(argv[0])} exited with {process.returncode}"}
    return json.loads(lines[-1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for row in f.readlines()[1:]:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


class Server:
    """A baseline's server process; waits until its port listens, kills it on exit."""

    def __init__(self, argv, port, env=None):
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 15
        # Bounded wait for the listener; each round also notices a server that died.
        while not listening(port):
            if self.process.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"{argv[0]} did not listen on {port}")
            try:
                self.process.wait(timeout=0.01)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def merge_rounds(rounds):
    """Combines the same program's output from several rounds: percentiles and medians by their
    median across rounds, minima by the minimum, maxima by the maximum, sample counts summed."""
    rounds = [r for r in rounds if r not in (None, {}, [])]
    if not rounds:
        return {}
    first = rounds[0]
    if isinstance(first, dict):
        merged = {}
        for key, value in first.items():
            values = [r[key] for r in rounds if isinstance(r, dict) and key in r]
            if isinstance(value, (dict, list)):
                merged[key] = merge_rounds(values)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                if key.startswith("min"):
                    merged[key] = min(values)
                elif key.startswith("max"):
                    merged[key] = max(values)
                elif key in ("samples", "iterations", "count"):
                    merged[key] = sum(values)
                elif key == "size" or key.endswith("bytes"):
                    merged[key] = value
                else:
                    merged[key] = median(values)
            else:
                merged[key] = value
        return merged
    if isinstance(first, list) and all(isinstance(r, list) and len(r) == len(first)
                                       for r in rounds):
        return [merge_rounds([r[i] for r in rounds]) for i in range(len(first))]
    return first


class NatsServer:
    """nats-server with JetStream on a free loopback port and a temporary store, for the NATS
    programs of all rounds; stopped and removed on exit."""

    def __enter__(self):
        self.folder = tempfile.TemporaryDirectory(prefix="memwire-bench-nats-")
        port = free_port()
        config = os.path.join(self.folder.name, "server.conf")
        with open(config, "w") as f:
            f.write(f'listen: "127.0.0.1:{port}"\nserver_name: memwire_bench_{port}\n'
                    f'jetstream {{ store_dir: "{self.folder.name}/store" }}\n')
        self.server = Server(["nats-server", "-c", config], port)
        self.url = f"nats://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)
        self.folder.cleanup()


class IdlePolling:
    """Holds a PM QoS request of 0 us on /dev/cpu_dma_latency while the suite runs: idle vCPUs
    then poll instead of halting. In a VM each halt makes the next wake-up wait for the
    hypervisor (here a TCP ping-pong takes ~65 us instead of ~15 us), and that tax, not the
    software under test, would dominate every latency and small-transfer figure. The kernel
    drops the request when the file closes, also if the suite dies."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.fd = None
        self.state = "not requested (--cpu-idle default)"

    def __enter__(self):
        if self.enabled:
            try:
                self.fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
                os.write(self.fd, (0).to_bytes(4, sys.byteorder))
                self.state = "0 us held (idle CPUs poll)"
            except OSError as error:
                self.state = f"default: /dev/cpu_dma_latency: {error.strerror}"
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


# --- baselines run by their own tools -------------------------------------------------------


def iperf3(trials):
    port = free_port()
    rates = []
    with Server(["iperf3", "-s", "-p", str(port)], port):
        for _ in range(trials):
            out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"],
                                 capture_output=True, text=True, timeout=60)
            data = json.loads(out.stdout)
            if "error" in data:
                return {"error": data["error"]}
            rates.append(data["end"]["sum_received"]["bits_per_second"] / 8 / 1e9)
            log(f"    iperf3 single stream {rates[-1]:.3f} GB/s")
    return {"trials": rates, "gbps": summary(rates)}


def ucx_iterations(tls, test, size):
    # UCX's tcp put emulation moves about one 16 MiB message per second here: keep it short.
    if tls == "tcp" and test == "ucp_put_bw":
        return (2, 1) if size <= 16 * MiB else (1, 1)
    if tls == "tcp":
        return (30, 3) if size <= 16 * MiB else (10, 2)
    return (100, 10) if size <= 16 * MiB else (30, 5)


def ucx_perftest(tls, test, size, trials):
    env = dict(os.environ, UCX_TLS=tls)
    iterations, warmup = ucx_iterations(tls, test, size)
    rates = []
    for _ in range(trials):
        port = free_port()
        with Server(["ucx_perftest", "-p", str(port)], port, env=env):
            out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test,
                                  "-s", str(size), "-n", str(iterations), "-w", str(warmup)],
                                 capture_output=True, text=True, timeout=120, env=env)
        final = [l for l in out.stdout.splitlines() if l.startswith("Final:")]
        if not final:
            return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
        # Final: iterations, latency p50/avg/overall (us), bandwidth avg/overall (MiB/s), ...
        rates.append(float(final[0].split()[6]) * MiB / 1e9)
    log(f"    ucx_perftest UCX_TLS={tls} {test} {size_name(size)}: "
        + " ".join(f"{r:.3f}" for r in rates) + " GB/s")
    return {"tls": tls, "test": test, "size": size, "iterations": iterations,
            "trials": rates, "gbps": summary(rates)}


# --- the report -----------------------------------------------------------------------------


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}x"


def find_throughput(results, transport, op, size, descs=1, conc=1):
    entries = results.get("memwire", {}).get("throughput", {}).get(transport, {})
    for entry in entries.get("results", []) or []:
        if (entry["op"], entry["size"], entry["descs"], entry["conc"]) == (op, size, descs, conc):
            return entry
    return None


def find_concurrency_reference(results, transport):
    """1 MiB READs one at a time, cycling through 64 buffers (the working set of c=64)."""
    run = results.get("memwire", {}).get("concurrency_reference", {}).get(transport, {})
    for entry in run.get("results", []) or []:
        return entry
    return None


def gbps(entry):
    return entry["gbps"]["median"] if entry and "gbps" in entry else None


def memcpy_gbps(results, size):
    for entry in results["baselines"].get("memcpy", []):
        if entry["size"] == size:
            return entry["gbps"]["median"]
    return None


def ucx_gbps(results, tls, test, size):
    for entry in results["baselines"].get("ucx", []):
        if (entry.get("tls"), entry.get("test"), entry.get("size")) == (tls, test, size):
            return entry["gbps"]["median"] if entry.get("gbps") else None
    return None


def throughput_baseline(results, transport, size):
    if transport == "tcp":
        iperf = results["baselines"].get("iperf3", {})
        return "iperf3", (iperf.get("gbps") or {}).get("median")
    return "memcpy", memcpy_gbps(results, size)


def latency_entry(results, transport, size):
    lat = results["memwire"]["latency"].get(transport, {})
    for entry in lat.get("results", []) or []:
        if entry["size"] == size:
            return entry
    return None


def pingpong_p50(results, size):
    for entry in results["baselines"].get("tcp_pingpong", []):
        if entry["size"] == size:
            return entry["us"]["p50"]
    return None


def request_reply_entry(results, socket, depth):
    for entry in results["baselines"].get("request_reply", {}).get(socket, []) or []:
        if entry.get("depth") == depth:
            return entry
    return None


def pipelined_entry(results, transport):
    runs = results["memwire"].get("pipelined", {}).get(transport, {})
    for entry in runs.get("results", []) or []:
        if "gbps" in entry:
            return entry
    return None


def connections_entry(results, transport):
    runs = results["memwire"].get("connections", {}).get(transport, {})
    for entry in runs.get("results", []) or []:
        if entry.get("rounds"):
            return entry
    return None


def fanin_rows(results):
    """{owners: (memwire tcp entry, raw entry)} of the fan-in rounds."""
    mine = {e["owners"]: e for e in results["memwire"].get("fanin", {}).get("tcp", []) or []
            if "round_ms" in e}
    raw = {e["owners"]: e for e in results["baselines"].get("fanin_raw", []) or []
           if "round_ms" in e}
    return {owners: (mine[owners], raw.get(owners)) for owners in sorted(mine)}


def fanin_targets(results, add):
    rows = fanin_rows(results)
    if 64 not in rows or 1 not in rows:
        add("fan-in, 64 owners (tcp): aggregate vs one owner", 0.9, None, True)
        return
    one, one_raw = rows[1]
    many, many_raw = rows[64]
    cpus = results["meta"].get("cpus") or os.cpu_count() or 1
    add("fan-in, 64 owners (tcp): reader threads vs 2 x CPUs + the loop's fixed threads", 1.0,
        ratio(many["reader_threads"], 2 * cpus + 2), False,
        f"{many['reader_threads']} threads")
    raw_note = ""
    if one_raw and many_raw:
        raw_note = (f"raw fan-in on this machine: 64 owners "
                    f"{many_raw['aggregate_gbps'] / one_raw['aggregate_gbps']:.2f}x one owner, "
                    f"p99/p50 {many_raw['round_ms']['p99'] / many_raw['round_ms']['p50']:.2f}; "
                    f"memwire's 64 owners "
                    f"{many['aggregate_gbps'] / many_raw['aggregate_gbps']:.2f}x raw's")
    add("fan-in, 64 owners (tcp): aggregate vs one owner", 0.9,
        ratio(many["aggregate_gbps"], one["aggregate_gbps"]), True, raw_note)
    add("fan-in, 64 owners (tcp): round p99 vs p50", 2.5,
        ratio(many["round_ms"]["p99"], many["round_ms"]["p50"]), False)


def kv_entry(results, transport, op, descs):
    runs = results["memwire"].get("kv_cache", {}).get(transport, {})
    for entry in runs.get("results", []) or []:
        if entry["op"] == op and entry["descs"] == descs and "gbps" in entry:
            return entry
    return None


def metadata_allowance(results, channel):
    """(2048-descriptor made + fetched) / (2 x 1-descriptor made + fetched + its bytes at line
    rate); line rate: iperf3's loopback single stream."""
    rows = {e["descriptors"]: e for e in results["memwire"].get("metadata_scale", {}).get("results", [])}
    iperf = (results["baselines"].get("iperf3", {}).get("gbps") or {}).get("median")
    one, many = rows.get(1), rows.get(2048)
    if not one or not many or not iperf:
        return None, ""
    cost = lambda e: e["made"]["p50_us"] + e[channel + "_fetch"]["p50_us"]
    wire_us = many["bytes"] / (iperf * 1e9) * 1e6
    allowance = 2 * cost(one) + wire_us
    return cost(many) / allowance, (f"{cost(many):.0f} us against {allowance:.0f} us "
                                    f"(2 x {cost(one):.0f} + {many['bytes']} B in {wire_us:.0f} us)")


# The raw request/reply baseline each memwire transport compares with: the socket it sends on.
FAIR_SOCKET = {"tcp": "tcp", "shm": "unix"}


def verdict(measured, target, at_least):
    if measured is None:
        return "not measured"
    if (measured >= target) if at_least else (measured <= target):
        return "met"
    if at_least:
        return f"MISSED by {100 * (1 - measured / target):.0f}% ({measured:.2f}x of >= {target}x)"
    return f"MISSED by {100 * (measured / target - 1):.0f}% ({measured:.2f}x vs <= {target}x)"


def pool_targets(results, add):
    """Issue 21's targets, from pool_bench of this run."""
    pools = results["memwire"].get("pools", {})
    for transport in ("tcp", "shm"):
        run = pools.get(transport) or {}
        if not run.get("metadata"):
            add(f"pools ({transport})", 1.0, None, True, run.get("error", "pool_bench did not run"))
            continue
        if transport == "tcp":
            meta = run["metadata"]
            add("pool metadata of 80 x 2 x 2,000 blocks, bytes / 4 KiB", 1.0,
                meta["pool_bytes"] / 4096, False, f"{meta['pool_bytes']} bytes")
            add("pool metadata made + parsed vs 1-descriptor metadata made + parsed", 2.0,
                ratio(meta["pool_us"], meta["one_descriptor_us"]), False,
                f"{meta['pool_us']:.1f} us vs {meta['one_descriptor_us']:.1f} us; for information: "
                "the target includes the fetch by name (the two rows below)")
        for op in ("read", "write"):
            figure = run["scattered"][op]
            add(f"{op.upper()} 128 random x 16 KiB pool blocks ({transport}) vs one 2 MiB run",
                0.8, figure["ratio"], True,
                f"{figure['random_gbps']:.2f} vs {figure['contiguous_gbps']:.2f} GB/s")
        socket = FAIR_SOCKET[transport]
        raw_rr = request_reply_entry(results, socket, 1)
        tagged = run["tagged"]
        add(f"4 KiB block with a tag, to tag delivered and acknowledged ({transport}) vs raw "
            f"64 B -> 4 KiB over {socket}", 1.3,
            ratio(tagged["p50_us"], raw_rr["us"]["p50"] if raw_rr else None), False,
            f"p50 {tagged['p50_us']:.1f} us")
        for layer in run["layers"]:
            compute = layer["compute_ms"]
            add(f"layer-wise, {compute} ms compute/layer ({transport}): end to end vs 1.1 x "
                f"max(compute, transfer) + a layer", 1.0,
                ratio(layer["end_to_end_ms"], layer["bound_ms"]), False,
                f"{layer['end_to_end_ms']:.1f} ms; bulk after compute "
                f"{layer['bulk_after_compute_ms']:.1f} ms; one operation per layer "
                f"{layer['per_layer_operations_ms']:.1f} ms")
            add(f"layer-wise, {compute} ms compute/layer ({transport}): first layer usable vs a "
                f"layer's transfer", 2.0, layer["first_usable_layers"], False,
                f"{layer['first_usable_us']:.0f} us; a layer {layer['one_layer_us']:.0f} us")
        add(f"registrations by repeated pool transfers ({transport})", 0.0,
            run.get("registrations_after_first"), False, "telemetry: registrations_total")


def evaluate_targets(results):
    targets = []

    def add(figure, target, measured, at_least, note=""):
        targets.append({"figure": figure, "target": ("≥ " if at_least else "≤ ") + f"{target}x",
                        "measured": measured, "status": verdict(measured, target, at_least),
                        "note": note})

    iperf = (results["baselines"].get("iperf3", {}).get("gbps") or {}).get("median")
    add("TCP READ 64 MiB vs iperf3 single stream", 1.0,
        ratio(gbps(find_throughput(results, "tcp", "read", 64 * MiB)), iperf), True)
    add("TCP READ 16 MiB vs UCX tcp get", 2.0,
        ratio(gbps(find_throughput(results, "tcp", "read", 16 * MiB)),
              ucx_gbps(results, "tcp", "ucp_get", 16 * MiB)), True)
    add("TCP WRITE 16 MiB vs UCX tcp put", 2.0,
        ratio(gbps(find_throughput(results, "tcp", "write", 16 * MiB)),
              ucx_gbps(results, "tcp", "ucp_put_bw", 16 * MiB)), True,
        "UCX 1.13's tcp put is pathological here (seconds per message)")
    shm_note = ""
    shm = results["memwire"]["throughput"].get("shm", {})
    if not shm.get("available", False):
        shm_note = "shm not available: " + shm.get("reason", shm.get("error", "?"))
    # UCX's sm get reads memory that ucx_perftest allocated in shared memory and the peer
    # mapped; memwire's like for like is a SharedBuffer. Plain memory costs a kernel copy
    # (process_vm_readv), shown for information.
    for transport, kind in (("shm-shared", "SharedBuffer"), ("shm", "plain memory, CMA")):
        info = transport == "shm"
        add(f"same-host READ 16 MiB ({kind}) vs UCX sm get", 1.0,
            ratio(gbps(find_throughput(results, transport, "read", 16 * MiB)),
                  ucx_gbps(results, "sm", "ucp_get", 16 * MiB)), True,
            "for information" if info else shm_note)
        add(f"same-host READ 64 MiB ({kind}) vs 1-thread memcpy 64 MiB", 0.8,
            ratio(gbps(find_throughput(results, transport, "read", 64 * MiB)),
                  memcpy_gbps(results, 64 * MiB)), True, "for information" if info else shm_note)
    lead = [r["ratio"] for r in results["memwire"].get("shared_lead", []) if r["ratio"]]
    spread = (f"{len(lead)} rounds: " + " ".join(f"{r:.2f}" for r in lead)) if lead else ""
    add("SharedBuffer READ 16 MiB vs UCX sm get, alternating rounds: median", 1.0,
        median(lead) if lead else None, True, spread)
    add("SharedBuffer READ 16 MiB vs UCX sm get, alternating rounds: worst", 0.9,
        min(lead) if lead else None, True)
    for transport in ("tcp", "shm"):
        entry = latency_entry(results, transport, 4096)
        add(f"4 KiB READ round trip p50 ({transport}) vs raw TCP ping-pong p50", 2.0,
            ratio(entry["us"]["p50"] if entry else None, pingpong_p50(results, 4096)), False,
            shm_note if transport == "shm" else "")
    for transport in ("tcp", "shm"):
        entry = latency_entry(results, transport, 4096)
        socket = FAIR_SOCKET[transport]
        raw_rr = request_reply_entry(results, socket, 1)
        add(f"4 KiB READ p50 ({transport}, active side) vs raw 64 B -> 4 KiB over {socket}", 1.2,
            ratio(entry["active_us"]["p50"] if entry else None,
                  raw_rr["us"]["p50"] if raw_rr else None), False,
            "begin_read until wait returns, the raw client's send until its reply is read")
    for transport in ("tcp", "shm"):
        entry = pipelined_entry(results, transport)
        socket = FAIR_SOCKET[transport]
        raw_rr = request_reply_entry(results, socket, 64)
        add(f"4 KiB READs, 64 in flight ({transport}) vs raw pipelined over {socket}, ops/s", 0.7,
            ratio(entry["ops_per_s_median"] if entry else None,
                  raw_rr["ops_per_s"] if raw_rr else None), True)
    fanin_targets(results, add)
    for transport in ("tcp", "shm"):
        entry = connections_entry(results, transport)
        live = entry["rounds"][-1] if entry else None
        cpus = results["meta"].get("cpus") or os.cpu_count() or 1
        add(f"1,008 live connections ({transport}): reader threads vs 2 x CPUs + the loop's fixed "
            "threads", 1.0, ratio(live["threads"], 2 * cpus + 2) if live else None, False,
            f"{live['sockets']} sockets, {live['threads']} threads, RSS "
            f"{entry['rss_kb_before'] / 1024:.1f} -> {live['rss_kb'] / 1024:.1f} MiB" if live else "")
    for transport in ("tcp", "shm"):
        for op in ("read", "write"):
            whole = kv_entry(results, transport, op, 1)
            for descs, block in ((512, "32 KiB"), (2048, "8 KiB")):
                add(f"{op.upper()} {descs} x {block} scattered ({transport}) vs contiguous 16 MiB",
                    0.8, ratio(gbps(kv_entry(results, transport, op, descs)), gbps(whole)), True)
    pool_targets(results, add)
    scale = results["memwire"].get("metadata_scale", {})
    rows = {e["descriptors"]: e for e in scale.get("results", [])}
    pool, one = scale.get("pool"), rows.get(1)
    for channel in ("http", "nats"):
        if not pool or not one:
            add(f"pool metadata made + fetched by name + parsed ({channel}) vs 1-descriptor", 2.0,
                None, False)
            continue
        # A fetch parses what it fetched: made + fetched covers all three.
        cost = lambda e: e["made"]["p50_us"] + e[channel + "_fetch"]["p50_us"]
        add(f"pool metadata (320,000 blocks) made + fetched by name + parsed ({channel}) vs "
            f"1-descriptor metadata", 2.0, ratio(cost(pool), cost(one)), False,
            f"{cost(pool):.0f} us vs {cost(one):.0f} us")
    for channel in ("http", "nats"):
        measured, note = metadata_allowance(results, channel)
        add(f"2048-descriptor metadata made + fetched ({channel}) vs 2x 1-descriptor + bytes", 1.0,
            measured, False, note)
    fetch = results["memwire"]["fetch"]
    raw = results["baselines"]
    add("NATS request/reply fetch p50 vs raw nats.c request/reply p50", 1.2,
        ratio(fetch.get("nats", {}).get("request_reply", {}).get("median_us"),
              raw.get("nats_raw", {}).get("request_reply", {}).get("p50_us")), False)
    add("HTTP fetch p50 vs raw httplib+curl p50", 1.2,
        ratio(fetch.get("http", {}).get("fetch", {}).get("median_us"),
              raw.get("http_raw", {}).get("get", {}).get("p50_us")), False)
    for transport in ("tcp", "shm"):
        one = find_throughput(results, transport, "read", MiB, 1, 1)
        many = find_throughput(results, transport, "read", MiB, 1, 64)
        note = shm_note if transport == "shm" else ""
        # c=64 cycles through 64 MiB of buffers per side, c=1 through one 1 MiB buffer that
        # stays in the caches: the same c=1 over 64 buffers isolates what concurrency costs.
        spread = find_concurrency_reference(results, transport)
        add(f"1 -> 64 x 1 MiB READs ({transport}): throughput c64/c1, same 64 buffers", 0.95,
            ratio(gbps(many), gbps(spread)), True,
            "must not fall; 5% allowed for noise" + ("; " + note if note else ""))
        add(f"1 -> 64 x 1 MiB READs ({transport}): c64 vs c1 on one cached buffer", 0.95,
            ratio(gbps(many), gbps(one)), True, "for information: includes the cache effect")
        if one and many and "rss_kb" in one and "rss_kb" in many:
            in_flight_kb = 64 * MiB // 1024
            for side in ("driver", "peer"):
                extra = lambda e: e["rss_kb"][side]["hwm"] - e["rss_kb"][side]["buffers"]
                growth = extra(many) - extra(one)
                add(f"1 -> 64 x 1 MiB READs ({transport}): {side} RSS growth / 64 MiB in flight",
                    1.0, growth / in_flight_kb, False,
                    f"grew {growth / 1024:.1f} MiB beyond its buffers")
        else:
            add(f"1 -> 64 x 1 MiB READs ({transport}): RSS growth / 64 MiB in flight",
                1.0, None, False, note)
    return targets


def render(results):
    out = []
    meta = results["meta"]
    out.append(f"memwire benchmark suite — {meta['started']}, {meta['host']}, {meta['cpus']} CPUs, "
               f"git {meta['git']}")
    out.append(f"load average at start {meta['load_start']}, at end {meta['load_end']}; "
               f"wall time {meta['wall_s']:.0f} s; cpu_dma_latency "
               f"{meta.get('cpu_dma_latency', '?')}")
    out.append("")

    # Throughput: one block per transport; columns are sizes.
    sizes = [int(s) for s in meta["sizes"]]
    head = f"{'':24}" + "".join(f"{size_name(s):>13}" for s in sizes)
    for transport in THROUGHPUT_RUNS:
        data = results["memwire"]["throughput"].get(transport, {})
        if not data.get("available", False):
            reason = data.get("reason") or data.get("error") or "not run"
            out.append(f"memwire {transport}: not available — {reason}")
            out.append("")
            continue
        base_name, _ = throughput_baseline(results, transport, sizes[0])
        out.append(f"memwire {THROUGHPUT_RUNS[transport][0]} throughput, GB/s: median [min-max]; "
                   f"ratio to {base_name}"
                   + (" (single stream)" if base_name == "iperf3" else " of the same size"))
        out.append(head)
        for op in ("read", "write"):
            for descs in (1, 16):
                for conc in (1, 64):
                    cells, ranges, ratios = [], [], []
                    for size in sizes:
                        entry = find_throughput(results, transport, op, size, descs, conc)
                        if entry is None or "skipped" in entry:
                            cells.append("-"), ranges.append(""), ratios.append("")
                        elif "error" in entry or "gbps" not in entry:
                            cells.append("error"), ranges.append(""), ratios.append("")
                        else:
                            g = entry["gbps"]
                            cells.append(f"{g['median']:.3f}")
                            ranges.append(f"{g['min']:.2f}-{g['max']:.2f}")
                            ratios.append(fmt_ratio(ratio(
                                g["median"], throughput_baseline(results, transport, size)[1])))
                    label = f"{op.upper():5} d={descs:<2} c={conc:<2}"
                    out.append(f"{label:24}" + "".join(f"{c:>13}" for c in cells))
                    out.append(f"{'':24}" + "".join(f"{c:>13}" for c in ranges))
                    out.append(f"{'  vs ' + base_name:24}" + "".join(f"{c:>13}" for c in ratios))
        out.append("  d = descriptors per operation (the size split evenly), c = operations in "
                   "flight; '-' = not run (c x size over 1 GiB)")
        # Memory of both processes: the peak, and what memwire adds beyond the buffers.
        out.append("  RSS, MiB, driver/peer, READ d=1: peak during the trials; and peak minus RSS "
                   "once the buffers were filled"
                   + (" (the driver's includes the peer's buffers it maps)"
                      if transport == "shm-shared" else ""))
        for conc in (1, 64):
            peak, extra = [], []
            for size in sizes:
                e = find_throughput(results, transport, "read", size, 1, conc)
                if e and "rss_kb" in e:
                    r = e["rss_kb"]
                    peak.append(f"{r['driver']['hwm'] / 1024:.0f}/{r['peer']['hwm'] / 1024:.0f}")
                    extra.append(f"{(r['driver']['hwm'] - r['driver']['buffers']) / 1024:.1f}/"
                                 f"{(r['peer']['hwm'] - r['peer']['buffers']) / 1024:.1f}")
                else:
                    peak.append("-")
                    extra.append("-")
            out.append(f"{'    peak c=' + str(conc):24}" + "".join(f"{c:>13}" for c in peak))
            out.append(f"{'    beyond buffers c=' + str(conc):24}" +
                       "".join(f"{c:>13}" for c in extra))
        spread = find_concurrency_reference(results, transport)
        if spread and "gbps" in spread:
            g = spread["gbps"]
            out.append(f"  READ d=1 c=1 1M cycling through 64 buffers (the memory c=64 touches): "
                       f"{g['median']:.3f} GB/s [{g['min']:.2f}-{g['max']:.2f}]")
        out.append("")

    # UCX comparison.
    out.append("memwire vs UCX (ucx_perftest, same sizes; memwire d=1 c=1), GB/s median [min-max]")
    out.append(f"  {'UCX':28}{'UCX GB/s':>22}   {'memwire':16}{'GB/s':>8}{'ratio':>9}")
    for entry in results["baselines"].get("ucx", []):
        if "error" in entry:
            out.append(f"  UCX {entry}: error")
            continue
        op = "read" if entry["test"] == "ucp_get" else "write"
        g = entry["gbps"]
        label = f"UCX_TLS={entry['tls']} {entry['test']} {size_name(entry['size'])}"
        for transport in (("tcp",) if entry["tls"] == "tcp" else ("shm-shared", "shm")):
            mine = gbps(find_throughput(results, transport, op, entry["size"]))
            mine_text = "n/a" if mine is None else f"{mine:.3f}"
            out.append(f"  {label:28}{g['median']:>9.3f} [{g['min']:.2f}-{g['max']:.2f}]   "
                       f"{transport + ' ' + op.upper():16}{mine_text:>8}"
                       f"{fmt_ratio(ratio(mine, g['median'])):>9}")
            label = ""
    out.append("  shm-shared: the peer's buffers are a SharedBuffer, which the driver maps (UCX sm "
               "maps memory ucx_perftest allocated, likewise); shm: plain memory, a kernel copy")
    out.append("")

    # Baselines by themselves.
    out.append("baselines, GB/s median [min-max]")
    memcpy = results["baselines"].get("memcpy", [])
    out.append("  memcpy (1 thread)  " + "  ".join(
        f"{size_name(e['size'])} {e['gbps']['median']:.2f} [{e['gbps']['min']:.1f}-{e['gbps']['max']:.1f}]"
        for e in memcpy))
    iperf = results["baselines"].get("iperf3", {})
    if "gbps" in iperf:
        g = iperf["gbps"]
        out.append(f"  iperf3 single stream, loopback, 3 s x {len(iperf['trials'])}: "
                   f"{g['median']:.3f} [{g['min']:.3f}-{g['max']:.3f}]")
    else:
        out.append(f"  iperf3: {iperf.get('error', 'not run')}")
    out.append("")

    # Latency.
    n_rounds = len(results.get("rounds", {}).get("pingpong", [])) or 1
    out.append("small-operation latency, microseconds: memwire READ end to end (both sides "
               "complete) vs raw TCP ping-pong of the same size; median of "
               f"{n_rounds} alternating rounds")
    out.append(f"  {'':22}{'p50':>9}{'p99':>9}{'ping-pong p50':>15}{'p99':>9}{'ratio p50':>11}"
               f"   active side alone p50/p99")
    for transport in ("tcp", "shm"):
        lat = results["memwire"]["latency"].get(transport, {})
        if not lat.get("available", False):
            out.append(f"  {transport}: not available — {lat.get('reason', lat.get('error', '?'))}")
            continue
        for entry in lat["results"]:
            size = entry["size"]
            pp = next((e for e in results["baselines"].get("tcp_pingpong", [])
                       if e["size"] == size), None)
            pp50, pp99 = (pp["us"]["p50"], pp["us"]["p99"]) if pp else (None, None)
            out.append(f"  {transport + ' READ ' + size_name(size):22}{entry['us']['p50']:>9.1f}"
                       f"{entry['us']['p99']:>9.1f}{pp50 or 0:>15.1f}{pp99 or 0:>9.1f}"
                       f"{fmt_ratio(ratio(entry['us']['p50'], pp50)):>11}"
                       f"   {entry['active_us']['p50']:.1f}/{entry['active_us']['p99']:.1f}")
    out.append("")

    out.append("READ against the raw request/reply it does (64 B request -> 4 KiB reply, one kept "
               f"connection), microseconds; median of {n_rounds} alternating rounds")
    out.append(f"  {'':22}{'active p50':>11}{'p99':>9}   {'raw over':10}{'p50':>9}{'p99':>9}"
               f"{'ratio p50':>11}")
    for transport in ("tcp", "shm"):
        entry = latency_entry(results, transport, 4096)
        socket = FAIR_SOCKET[transport]
        raw_rr = request_reply_entry(results, socket, 1)
        if not entry or not raw_rr:
            out.append(f"  {transport}: not measured")
            continue
        out.append(f"  {transport + ' READ 4K':22}{entry['active_us']['p50']:>11.1f}"
                   f"{entry['active_us']['p99']:>9.1f}   {socket:10}{raw_rr['us']['p50']:>9.1f}"
                   f"{raw_rr['us']['p99']:>9.1f}"
                   f"{fmt_ratio(ratio(entry['active_us']['p50'], raw_rr['us']['p50'])):>11}")
    n_pipelined = len(results.get("rounds", {}).get("pipelined_tcp", [])) or 1
    out.append("4 KiB READs with 64 in flight against raw pipelined request/reply (64 in flight); "
               f"median of {n_pipelined} alternating rounds; CPU us per operation (all threads)")
    out.append(f"  {'':22}{'ops/s':>10}{'cpu driver':>12}{'peer':>8}   {'raw over':10}"
               f"{'ops/s':>10}{'cpu client':>12}{'server':>8}{'ratio':>8}")
    for transport in ("tcp", "shm"):
        entry = pipelined_entry(results, transport)
        socket = FAIR_SOCKET[transport]
        raw_rr = request_reply_entry(results, socket, 64)
        if not entry or not raw_rr:
            out.append(f"  {transport}: not measured")
            continue
        cpu = entry.get("cpu_us_per_op", {})
        out.append(f"  {transport + ' READ 4K c=64':22}{entry['ops_per_s_median']:>10.0f}"
                   f"{cpu.get('driver', 0):>12.2f}{cpu.get('peer', 0):>8.2f}   {socket:10}"
                   f"{raw_rr['ops_per_s']:>10.0f}{raw_rr['client_cpu_us_per_op']:>12.2f}"
                   f"{raw_rr['server_cpu_us_per_op']:>8.2f}"
                   f"{fmt_ratio(ratio(entry['ops_per_s_median'], raw_rr['ops_per_s'])):>8}")
    out.append("")

    rows = fanin_rows(results)
    if rows:
        n_fanin = len(results.get("rounds", {}).get("fanin_tcp", [])) or 1
        out.append("fan-in: one reader, N owner processes read at once, 1 MiB each (tcp; a fresh "
                   "readable per round, its owner waiting on it) against raw fan-in (one epoll "
                   f"thread, N loopback TCP replies); median of {n_fanin} alternating rounds")
        out.append(f"  {'owners':>8}{'threads':>9}{'p50 ms':>9}{'p99 ms':>9}{'GB/s':>8}"
                   f"   raw{'p50 ms':>9}{'p99 ms':>9}{'GB/s':>8}{'ratio':>8}")
        for owners, (mine, raw) in rows.items():
            line = (f"  {owners:>8}{mine['reader_threads']:>9}{mine['round_ms']['p50']:>9.2f}"
                    f"{mine['round_ms']['p99']:>9.2f}{mine['aggregate_gbps']:>8.2f}")
            if raw:
                line += (f"   {'':3}{raw['round_ms']['p50']:>9.2f}{raw['round_ms']['p99']:>9.2f}"
                         f"{raw['aggregate_gbps']:>8.2f}"
                         f"{fmt_ratio(ratio(mine['aggregate_gbps'], raw['aggregate_gbps'])):>8}")
            out.append(line)
        out.append("")

    out.append("KV-cache-shaped transfers: 16 MiB as scattered blocks (every other block of a "
               "32 MiB buffer), GB/s, median [min-max], against one 16 MiB block")
    for transport in ("tcp", "shm"):
        for op in ("read", "write"):
            cells = []
            for descs, label in ((1, "1 x 16M"), (512, "512 x 32K"), (2048, "2048 x 8K")):
                e = kv_entry(results, transport, op, descs)
                cells.append(f"{label} " + (f"{e['gbps']['median']:.2f} [{e['gbps']['min']:.2f}-"
                                            f"{e['gbps']['max']:.2f}]" if e else "n/a"))
            out.append(f"  {transport:4} {op:5}  " + "   ".join(cells))
    scale = results["memwire"].get("metadata_scale", {}).get("results", [])
    if scale:
        out.append("  metadata, p50 us: descriptors, bytes, made (built + JSON), parsed, "
                   "fetched by name over HTTP, over NATS request/reply")
        for e in scale:
            out.append(f"    {e['descriptors']:>5} {e['bytes']:>8} B  made {e['made']['p50_us']:8.1f}"
                       f"  parsed {e['parsed']['p50_us']:8.1f}  HTTP {e['http_fetch']['p50_us']:8.1f}"
                       f"  NATS {e['nats_fetch']['p50_us']:8.1f}")
    out.append("")

    out.append("by-name fetch latency, microseconds (client and server on loopback); median of "
               f"{n_rounds} alternating rounds")
    out.append(f"  {'':34}{'p50':>9}{'p99':>9}   {'baseline':28}{'p50':>9}{'p99':>9}{'ratio p50':>11}")
    fetch = results["memwire"]["fetch"]
    raw = results["baselines"]
    rows = [
        ("HTTP fetch (HttpChannel)", fetch.get("http", {}).get("fetch"),
         "httplib + curl GET", raw.get("http_raw", {}).get("get")),
        ("NATS request/reply fetch", fetch.get("nats", {}).get("request_reply"),
         "nats.c request/reply", raw.get("nats_raw", {}).get("request_reply")),
        ("NATS KV fetch (no responder, KV)", fetch.get("nats", {}).get("kv"),
         "nats.c kvStore_Get", raw.get("nats_raw", {}).get("kv_get")),
    ]
    for name, mine, base_name, base in rows:
        if not mine or not base:
            out.append(f"  {name:34}  not measured")
            continue
        out.append(f"  {name:34}{mine['median_us']:>9.1f}{mine['p99_us']:>9.1f}   {base_name:28}"
                   f"{base['p50_us']:>9.1f}{base['p99_us']:>9.1f}"
                   f"{fmt_ratio(ratio(mine['median_us'], base['p50_us'])):>11}")
    parse = fetch.get("http", {}).get("from_json")
    if parse:
        out.append(f"  each memwire fetch decodes and checks the metadata: RdmaMetadata::from_json "
                   f"alone takes {parse['median_us']:.1f} us (p50)")
    out.append("")

    out.append("targets (issues 5 and 12)")
    for t in results["targets"]:
        measured = "n/a" if t["measured"] is None else f"{t['measured']:.2f}x"
        note = f"  ({t['note']})" if t["note"] else ""
        out.append(f"  {t['figure']:<62} {t['target']:>7} {measured:>8}  {t['status']}{note}")
    return "\n".join(out)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 6.5))
    styles = {("tcp", "read"): ("tab:blue", "o"), ("tcp", "write"): ("tab:cyan", "s"),
              ("shm", "read"): ("tab:red", "o"), ("shm", "write"): ("tab:orange", "s"),
              ("shm-shared", "read"): ("darkred", "P"), ("shm-shared", "write"): ("goldenrod", "X")}
    for (transport, op), (color, marker) in styles.items():
        for conc, line in ((1, "-"), (64, ":")):
            xs, ys, lo, hi = [], [], [], []
            for size in [int(s) for s in results["meta"]["sizes"]]:
                e = find_throughput(results, transport, op, size, 1, conc)
                if e and "gbps" in e:
                    xs.append(size)
                    ys.append(e["gbps"]["median"])
                    lo.append(e["gbps"]["median"] - e["gbps"]["min"])
                    hi.append(e["gbps"]["max"] - e["gbps"]["median"])
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], color=color, marker=marker, linestyle=line,
                            capsize=3, label=f"memwire {transport} {op.upper()} 1 desc, c={conc}")
    memcpy = results["baselines"].get("memcpy", [])
    if memcpy:
        ax.errorbar([e["size"] for e in memcpy], [e["gbps"]["median"] for e in memcpy],
                    yerr=[[e["gbps"]["median"] - e["gbps"]["min"] for e in memcpy],
                          [e["gbps"]["max"] - e["gbps"]["median"] for e in memcpy]],
                    color="black", marker="^", linestyle="--", capsize=3,
                    label="memcpy, 1 thread")
    iperf = results["baselines"].get("iperf3", {})
    if "gbps" in iperf:
        ax.axhline(iperf["gbps"]["median"], color="gray", linestyle="-.",
                   label="iperf3 single stream (loopback)")
    ucx_styles = {("tcp", "ucp_get"): ("tab:green", "D"), ("tcp", "ucp_put_bw"): ("darkgreen", "v"),
                  ("sm", "ucp_get"): ("tab:purple", "D"), ("sm", "ucp_put_bw"): ("magenta", "v")}
    for entry in results["baselines"].get("ucx", []):
        if "gbps" not in entry or not entry["gbps"]:
            continue
        color, marker = ucx_styles[(entry["tls"], entry["test"])]
        label = f"UCX {entry['tls']} {entry['test']}"
        if label in ax.get_legend_handles_labels()[1]:
            label = None
        g = entry["gbps"]
        ax.errorbar([entry["size"]], [g["median"]],
                    yerr=[[g["median"] - g["min"]], [g["max"] - g["median"]]], color=color,
                    marker=marker, markersize=9, linestyle="none", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = [int(s) for s in results["meta"]["sizes"]]
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_name(s) for s in sizes])
    ax.set_xlabel("bytes per operation")
    ax.set_ylabel("GB/s (median; bars: min-max)")
    ax.set_title(f"memwire throughput vs baselines — {results['meta']['host']}, "
                 f"{results['meta']['cpus']} CPUs, {results['meta']['started'][:10]}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def git_revision(root):
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "sdk",
                                "sideband"], capture_output=True, text=True).stdout.strip()
        return rev + (" (sdk/sideband with uncommitted changes)" if dirty else "")
    except OSError:
        return "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", required=True, help="folder with the built bench programs")
    parser.add_argument("--out", required=True, help="folder for latest.json and the plot")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--large-trials", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer sizes and samples")
    parser.add_argument("--cpu-idle", choices=("poll", "default"), default="poll",
                        help="poll: hold /dev/cpu_dma_latency at 0 while running (default)")
    args = parser.parse_args()
    programs = os.path.join(args.build, "bench")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exe = lambda name: os.path.join(programs, name)

    sizes = "4K,1M,16M,64M" if args.quick else SIZES
    rounds = 3 if args.quick else 5
    samples = 300 if args.quick else 1000  # per round
    iterations = 200 if args.quick else 600  # per round
    trials = ["--trials", str(args.trials), "--large-trials", str(args.large_trials)]
    started = time.monotonic()
    results = {
        "meta": {
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "git": git_revision(root), "load_start": [round(x, 2) for x in os.getloadavg()],
            "sizes": [],
        },
        "memwire": {"throughput": {}, "latency": {}, "fetch": {}},
        "baselines": {},
    }
    if os.getloadavg()[0] > 1.0:
        log(f"note: load average {os.getloadavg()[0]:.1f} at start: figures will be noisy")

    with IdlePolling(args.cpu_idle == "poll") as idle:
        results["meta"]["cpu_dma_latency"] = idle.state
        log(f"cpu_dma_latency: {idle.state}")
        log("== memcpy baseline")
        results["baselines"]["memcpy"] = run_program(
            [exe("memcpy_bandwidth"), "--sizes", sizes] + trials, 300).get("memcpy", [])
        results["meta"]["sizes"] = [e["size"] for e in results["baselines"]["memcpy"]]

        for run, (_, options) in THROUGHPUT_RUNS.items():
            log(f"== memwire throughput, {run}")
            results["memwire"]["throughput"][run] = run_program(
                [exe("transfer_bench"), "throughput", "--sizes", sizes] + options + trials, 900)

        results["memwire"]["concurrency_reference"] = {}
        for transport in ("tcp", "shm"):
            log(f"== memwire c=1 over 64 buffers, {transport} (reference for c=64)")
            results["memwire"]["concurrency_reference"][transport] = run_program(
                [exe("transfer_bench"), "throughput", "--transport", transport, "--ops", "read",
                 "--sizes", "1M", "--descs", "1", "--conc", "1", "--slots", "64"] + trials, 300)

        log("== iperf3 baseline")
        try:
            results["baselines"]["iperf3"] = iperf3(1 if args.quick else 3)
        except (OSError, RuntimeError, subprocess.SubprocessError, ValueError) as error:
            results["baselines"]["iperf3"] = {"error": str(error)}

        log("== UCX baselines (ucx_perftest)")
        results["baselines"]["ucx"] = []
        for tls in ("tcp", "sm"):
            for test in ("ucp_get", "ucp_put_bw"):
                for size in UCX_SIZES:
                    try:
                        entry = ucx_perftest(tls, test, size, 1 if args.quick else 3)
                    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                        entry = {"error": str(error)}
                    entry.update({"tls": tls, "test": test, "size": size})
                    results["baselines"]["ucx"].append(entry)

        # The same-host lead, measured so that it can hold: SharedBuffer READ 16 MiB and UCX sm get
        # in alternating rounds (a ratio per round; both sides long enough trials: 1 GiB per
        # memwire trial, UCX's 100 iterations), so that neither side's figure comes from a
        # quieter moment or a warmer cache than the other's.
        lead_rounds = 2 if args.quick else 5
        log(f"== SharedBuffer READ 16 MiB vs UCX sm get, {lead_rounds} alternating rounds")
        lead = []
        for round_index in range(lead_rounds):
            mine = run_program(
                [exe("transfer_bench"), "throughput", "--transport", "shm", "--memory", "shared",
                 "--ops", "read", "--sizes", "16M", "--descs", "1", "--conc", "1",
                 "--trials", "3", "--target-bytes", "1G"], 300)
            try:
                theirs = ucx_perftest("sm", "ucp_get", 16 * MiB, 1)
            except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                theirs = {"error": str(error)}
            entry = next((e for e in mine.get("results", []) or [] if "gbps" in e), None)
            lead.append({"memwire_gbps": gbps(entry),
                         "ucx_gbps": (theirs.get("gbps") or {}).get("median"),
                         "ratio": ratio(gbps(entry), (theirs.get("gbps") or {}).get("median"))})
            log(f"    round {round_index + 1}: memwire {lead[-1]['memwire_gbps']} GB/s, "
                f"UCX {lead[-1]['ucx_gbps']} GB/s")
        results["memwire"]["shared_lead"] = lead

        # Latencies drift with whatever else the machine does: each memwire figure and its baseline
        # run in alternating rounds, and the rounds' percentiles are combined by their median.
        log(f"== latency and by-name fetch, {rounds} alternating rounds")
        collected = {key: [] for key in ("pingpong", "tcp", "shm", "http_raw", "http", "nats_raw",
                                         "nats", "rr_tcp", "rr_unix")}
        with NatsServer() as nats:
            for round_index in range(rounds):
                log(f"-- round {round_index + 1} of {rounds}")
                collected["pingpong"].append(run_program(
                    [exe("tcp_pingpong"), "--samples", str(samples)], 120).get("tcp_pingpong", []))
                for socket in ("tcp", "unix"):
                    collected["rr_" + socket].append(run_program(
                        [exe("request_reply"), "--socket", socket, "--depth", "1",
                         "--samples", str(samples)], 120).get("request_reply", []))
                for transport in ("tcp", "shm"):
                    collected[transport].append(run_program(
                        [exe("transfer_bench"), "latency", "--transport", transport,
                         "--samples", str(samples)], 300))
                collected["http_raw"].append(run_program(
                    [exe("http_get_raw"), "--iterations", str(iterations)], 120).get("http_raw", {}))
                collected["http"].append(run_program(
                    [exe("http_fetch_latency"), "--iterations", str(iterations)], 120))
                collected["nats_raw"].append(run_program(
                    [exe("nats_request_raw"), "--nats", nats.url, "--iterations", str(iterations)],
                    120).get("nats_raw", {}))
                collected["nats"].append(run_program(
                    [exe("nats_fetch_latency"), "--nats", nats.url, "--iterations", str(iterations)],
                    300))
        # Many small READs in flight against the raw pipelined request/reply, alternating.
        pipelined_rounds = 2 if args.quick else 3
        log(f"== 4 KiB READs with 64 in flight, {pipelined_rounds} alternating rounds")
        for key in ("pipelined_tcp", "pipelined_shm", "rr64_tcp", "rr64_unix"):
            collected[key] = []
        for round_index in range(pipelined_rounds):
            for transport in ("tcp", "shm"):
                socket = FAIR_SOCKET[transport]
                collected["rr64_" + socket].append(run_program(
                    [exe("request_reply"), "--socket", socket, "--depth", "64",
                     "--pipelined-ops", "20000" if args.quick else "100000"],
                    120).get("request_reply", []))
                collected["pipelined_" + transport].append(run_program(
                    [exe("transfer_bench"), "throughput", "--transport", transport, "--ops", "read",
                     "--sizes", "4K", "--descs", "1", "--conc", "64", "--max-ops", "16384",
                     "--target-bytes", "64M", "--trials", "3" if args.quick else "5"], 300))
        # Fan-in (issue 22): one reader, N owner processes read at once (1 MiB each, a fresh
        # readable per round whose owner waits on it), against the raw fan-in of the same shape
        # (one epoll thread draining N loopback TCP replies), alternating.
        fanin_rounds = 2 if args.quick else 3
        fanin_owners = "1,8,64" if args.quick else "1,8,32,64,256"
        log(f"== fan-in, owners {fanin_owners}, {fanin_rounds} alternating rounds")
        for key in ("fanin_tcp", "fanin_raw"):
            collected[key] = []
        for round_index in range(fanin_rounds):
            collected["fanin_raw"].append(run_program(
                [exe("fanin_raw"), "--owners", fanin_owners], 300).get("fanin_raw", []))
            collected["fanin_tcp"].append(run_program(
                [exe("transfer_bench"), "fanin", "--transport", "tcp", "--owners", fanin_owners],
                600).get("results", []))
        # 1,008 live connections into one reader: 16 owner processes x 63 reads in flight, a
        # connection per read (MEMWIRE_TCP_CONNECTIONS=63, under max_connections_per_peer 64).
        results["memwire"]["connections"] = {}
        for transport in ("tcp", "shm"):
            log(f"== 1,008 live connections, {transport}")
            results["memwire"]["connections"][transport] = run_program(
                [exe("transfer_bench"), "connections", "--transport", transport, "--owners", "16",
                 "--conc", "63"], 300, env=dict(os.environ, MEMWIRE_TCP_CONNECTIONS="63"))
        # KV-cache-shaped: 512 x 32 KiB and 2048 x 8 KiB, every other block of a buffer twice
        # the size, against one contiguous 16 MiB block laid out the same way, in one run.
        results["memwire"]["kv_cache"] = {}
        for transport in ("tcp", "shm"):
            log(f"== KV-cache-shaped transfers, {transport}")
            results["memwire"]["kv_cache"][transport] = run_program(
                [exe("transfer_bench"), "throughput", "--transport", transport, "--ops", "read,write",
                 "--sizes", "16M", "--descs", "1,512,2048", "--conc", "1", "--gap", "2"] + trials
                + (["--target-bytes", "64M"] if args.quick else []), 600)
        # Pools as KV-cache engines use them; the raw request/reply of this run is the baseline
        # of the tagged block (bench/pool_bench.cpp says what each figure is).
        results["memwire"]["pools"] = {}
        for transport in ("tcp", "shm"):
            log(f"== pools: scattered blocks, a tagged block, layer-wise streaming, {transport}")
            results["memwire"]["pools"][transport] = run_program(
                [exe("pool_bench"), "--transport", transport,
                 "--samples", "500" if args.quick else "2000",
                 "--rounds", "8" if args.quick else "20"], 600)
        log("== metadata of 1 and 2048 descriptors: made, fetched (HTTP, NATS), parsed")
        with NatsServer() as nats:
            results["memwire"]["metadata_scale"] = run_program(
                [exe("metadata_scale"), "--nats", nats.url,
                 "--iterations", "100" if args.quick else "300"], 300)
        results["rounds"] = collected
        results["baselines"]["request_reply"] = {
            socket: (merge_rounds(collected["rr_" + socket]) or [])
            + (merge_rounds(collected["rr64_" + socket]) or [])
            for socket in ("tcp", "unix")}
        results["memwire"]["pipelined"] = {
            transport: merge_rounds(collected["pipelined_" + transport]) for transport in ("tcp", "shm")}
        results["memwire"]["fanin"] = {"tcp": merge_rounds(collected["fanin_tcp"])}
        results["baselines"]["fanin_raw"] = merge_rounds(collected["fanin_raw"])
        results["baselines"]["tcp_pingpong"] = merge_rounds(collected["pingpong"])
        for transport in ("tcp", "shm"):
            results["memwire"]["latency"][transport] = merge_rounds(collected[transport])
        results["baselines"]["http_raw"] = merge_rounds(collected["http_raw"])
        results["memwire"]["fetch"]["http"] = merge_rounds(collected["http"])
        results["baselines"]["nats_raw"] = merge_rounds(collected["nats_raw"])
        results["memwire"]["fetch"]["nats"] = merge_rounds(collected["nats"])

    results["meta"]["load_end"] = [round(x, 2) for x in os.getloadavg()]
    results["meta"]["wall_s"] = time.monotonic() - started
    results["targets"] = evaluate_targets(results)
    table = render(results)
    print(table)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "latest.txt"), "w") as f:
        f.write(table + "\n")
    plot(results, os.path.join(args.out, "throughput.png"))
    log(f"wrote {args.out}/latest.json, latest.txt, throughput.png")


if __name__ == "__main__":
    main()
