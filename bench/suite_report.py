"""bench/suite.py's report: the text table and the plot."""

from suite_common import MiB, THROUGHPUT_RUNS, log, median, size_name
from suite_targets import (
    FAIR_SOCKET,
    fanin_rows,
    find_concurrency_reference,
    find_throughput,
    fmt_ratio,
    gbps,
    kv_entry,
    latency_entry,
    pipelined_entry,
    ratio,
    request_reply_entry,
    throughput_baseline,
)


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

    out.append("targets (issues 5, 12, 21 and 35)")
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
