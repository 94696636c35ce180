"""bench/suite.py's figures looked up in its results, and the targets each is held to."""
import os

from suite_common import MiB, median


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
    add("fan-in, 64 owners (tcp): aggregate vs the raw fan-in of this run (issue 35)", 0.9,
        ratio(many["aggregate_gbps"], many_raw["aggregate_gbps"]) if many_raw else None, True)
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
    shared = (pools.get("shm-shared") or {}).get("scattered", {}).get("read")
    add("READ 128 random x 16 KiB pool blocks (shm, SharedBuffer pools) vs one 2 MiB run "
        "(issue 35)", 0.9, shared["ratio"] if shared else None, True,
        f"{shared['random_gbps']:.2f} vs {shared['contiguous_gbps']:.2f} GB/s" if shared
        else (pools.get("shm-shared") or {}).get("error", "pool_bench did not run"))
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
            # Issue 35's bound, no slack: the longer of compute and the bulk transfer, then
            # the last layer's transfer (pool_bench computes it).
            send = layer.get("send_us_per_layer")
            add(f"layer-wise, {compute} ms compute/layer ({transport}): end to end vs "
                f"max(compute, transfer) + a layer", 1.0,
                ratio(layer["end_to_end_ms"], layer["bound_ms"]), False,
                f"{layer['end_to_end_ms']:.1f} ms; "
                + (f"write_blocks {send:.0f} us a layer on prefill's thread; " if send else "")
                + f"bulk after compute "
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
        add(f"same-host READ 64 MiB ({kind}) vs 1-thread memcpy 64 MiB (issue 35)",
            1.0 if info else 1.5,
            ratio(gbps(find_throughput(results, transport, "read", 64 * MiB)),
                  memcpy_gbps(results, 64 * MiB)), True, shm_note)
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
