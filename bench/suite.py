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

from suite_common import MiB, SIZES, THROUGHPUT_RUNS, UCX_SIZES, log, median, size_name, summary  # noqa: E402,F401
from suite_report import plot, render  # noqa: E402
from suite_targets import FAIR_SOCKET, evaluate_targets, gbps, ratio, ucx_gbps  # noqa: E402


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
                for kind in ("tcp", "unix"):
                    collected["rr_" + kind].append(run_program(
                        [exe("request_reply"), "--socket", kind, "--depth", "1",
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
                kind = FAIR_SOCKET[transport]
                collected["rr64_" + kind].append(run_program(
                    [exe("request_reply"), "--socket", kind, "--depth", "64",
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
        # Issue 35: scattered blocks of a pool in a SharedBuffer, which the peer maps.
        log("== pools: scattered blocks, shm, both pools SharedBuffers")
        results["memwire"]["pools"]["shm-shared"] = run_program(
            [exe("pool_bench"), "--transport", "shm", "--memory", "shared", "--only", "scattered",
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
