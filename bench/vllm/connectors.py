"""MemwireConnector against vLLM's NixlConnector in one harness (integration/vllm: vLLM's own
Scheduler, KV planning and allocation, connector factory and worker lifecycle; a prefill and a
decode process and a router), alternating by round, each system alone.

Measured: decode add -> KV in (the request's first forward begins: every block loaded), p50
and p90, at 1,024 and 4,000 tokens; prefill add -> decode's KV in (what a user waits for, the
prefill's compute included), p50; the CPU time both engine processes spent per request (user +
system, every thread; the harness's serve loops are the same for every system).
memwire-push: the router sends the request to both engines at once and the prefill streams
each layer into decode's granted blocks as it computes it (transfer_mode "push"): decode add
is prefill add there, so its first column is the second. Every loaded byte is checked by the decode's stand-in
forward after that instant (outside the clock). Correctness: a read after the prefill's lease
ended, with the prefill's blocks reused by another request meanwhile: is it refused and
reported, or computed on?

    PYTHONPATH=BUILD/python HF_HUB_OFFLINE=1 ~/.cache/memwire-vllm/venv/bin/python \
      bench/vllm/connectors.py --rounds 3 --requests 10     (setup: bench/vllm/README.md)
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "integration", "vllm"))

from router import EngineProcess, Router, free_port  # noqa: E402

SYSTEMS = {
    "memwire": ("MemwireConnector", "memwire.vllm"),
    "memwire-push": ("MemwireConnector", "memwire.vllm"),
    "nixl": ("NixlConnector", None),
}


def prompt_of(length, seed):
    return [(seed * 7919 + i * 104729) % 1000 + 1 for i in range(length)]


def engines(system, lease, prefill_blocks=512):
    connector = SYSTEMS[system]
    p_port, d_port = free_port(), free_port()
    extra = {"kv_lease_duration": lease}
    if system == "memwire-push":
        extra["transfer_mode"] = "push"
    if system.startswith("memwire"):
        p_extra, d_extra = dict(extra, side_channel_port=p_port), dict(extra, side_channel_port=d_port)
        p_env = d_env = {"VLLM_TARGET_DEVICE": "cpu"}
    else:
        p_extra = d_extra = dict(extra)
        p_env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(p_port)}
        d_env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(d_port)}
    prefill = EngineProcess("kv_producer", p_extra, connector=connector, env=p_env, num_blocks=prefill_blocks)
    decode = EngineProcess("kv_consumer", d_extra, connector=connector, env=d_env)
    return Router(prefill, decode, decode_sideband=f"http://127.0.0.1:{d_port}")


def timing_round(system, sizes, requests, seed):
    router = engines(system, lease=30)
    generate = router.generate_pushed if system == "memwire-push" else router.generate
    try:
        generate(prompt_of(64, seed))  # warm: handshakes, first connections
        times = {n: ([], [], []) for n in sizes}  # add -> KV in, start -> KV in, CPU s
        for i in range(requests):
            for n in sizes:
                cpu = router.prefill.cpu_seconds() + router.decode.cpu_seconds()
                result = generate(prompt_of(n, seed * 1000 + i * 10 + n))
                cpu = router.prefill.cpu_seconds() + router.decode.cpu_seconds() - cpu
                if result["finish_reason"] != "length" or result["mismatched"] or \
                        result["checked"] != (n - 1) * 2:
                    raise SystemExit(f"{system}: {n} tokens not exact: {result}")
                for column, value in zip(times[n], (result["add_to_kv_in"], result["start_to_kv_in"], cpu)):
                    column.append(value)
        return times
    finally:
        router.prefill.stop()
        router.decode.stop()


def expired_lease(system):
    """A request's lease ends before decode reads; another request reuses the prefill's blocks."""
    if system == "memwire-push":
        return "no lease to outlive: decode owns the grant"
    router = engines(system, lease=2, prefill_blocks=40)
    try:
        request_id, first = router.prefill_only(prompt_of(1024, 1))
        time.sleep(3.0)
        router.prefill_only(prompt_of(1024, 2))  # takes the freed blocks
        result = router.decode.submit(f"{request_id}-d", prompt_of(1024, 1),
                                      dict(first["kv_transfer_params"]), 4).result(120)
        if result["finish_reason"] == "error":
            return "refused, reported (load error)"
        return f"{result['mismatched']} of {result['checked']} slots wrong, finished '{result['finish_reason']}'"
    finally:
        router.prefill.stop()
        router.decode.stop()


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--systems", default="memwire,memwire-push,nixl")
    args = parser.parse_args()
    systems = args.systems.split(",")
    sizes = (1024, 4000)
    times = {s: {n: ([], [], []) for n in sizes} for s in systems}
    for r in range(args.rounds):
        for system in (systems if r % 2 == 0 else systems[::-1]):
            started = time.monotonic()
            for n, columns in timing_round(system, sizes, args.requests, seed=r + 1).items():
                for kept, values in zip(times[system][n], columns):
                    kept.extend(values)
            print(f"round {r + 1} {system}: {time.monotonic() - started:.0f} s", flush=True)
    correctness = {s: expired_lease(s) for s in systems}
    print(f"\n{args.rounds} rounds x {args.requests} requests, alternating; every loaded slot checked "
          "outside the clock; ms, CPU ms per request (both engine processes)")
    base = systems[-1]
    print(f"{'system':13} {'tokens':>6} {'add->KV p50':>11} {'p90':>8} {'vs ' + base:>9} "
          f"{'start->KV p50':>13} {'vs ' + base:>9} {'CPU ms':>7}   read after the lease ended")
    for system in systems:
        for n in sizes:
            add, start, cpu = (statistics.median(v) * 1e3 for v in times[system][n])
            p90 = percentile(times[system][n][0], 0.9) * 1e3
            base_add, base_start = (statistics.median(v) * 1e3 for v in times[base][n][:2])
            print(f"{system:13} {n:>6} {add:11.2f} {p90:8.2f} {base_add / add:8.2f}x "
                  f"{start:13.2f} {base_start / start:8.2f}x {cpu:7.1f}   {correctness[system]}")


if __name__ == "__main__":
    main()
