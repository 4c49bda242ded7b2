#!/usr/bin/env python3
"""Prints issue 28's figures, each beside its baseline from the same `make bench` run.

Usage: bench-summary.py RESULTS_DIR

RESULTS_DIR holds what `make bench` wrote: one <bench>.txt per benchmark program (its stdout)
and agent-quiet.txt / agent-job.txt (scripts/measure-agent-cost.sh). A figure whose program did
not run, or printed nothing this script recognises, is listed as missing with the file it
looked for; nothing is filled in from an earlier run. Published reference figures (not
measured here) are named as such, with where they come from.

Exit status: 0 when every figure was found, 1 when one is missing (the benches ran but
something did not report), 2 on bad usage.
"""
import os
import platform
import re
import sys

# Published figures (docs/performance.md cites them): not measured by this run.
PROMETHEUS_BYTES_PER_SAMPLE = 2.08  # ../shared/bench/README.md, Prometheus TSDB 2.42 on its data
VICTORIA_BYTES_PER_SAMPLE = 0.62    # ../shared/bench/README.md, VictoriaMetrics 1.79 on its data
DCGM_EXPORTER_MIB = 71              # users' reports, quoted by issue 28
AGENT_RSS_BUDGET_MIB = 24           # issue 28's budget for the whole agent

SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def gbench_rows(text):
    """Google Benchmark console rows: name -> {real_ns, cpu_ns, counters}."""
    rows = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(BM_\S+)\s+([\d.]+) (ns|us|ms|s)\s+([\d.]+) (ns|us|ms|s)\s+(\d+)(.*)$", line)
        if not m:
            continue
        counters = {}
        for k, v, suf in re.findall(r"(\w+)=([\d.]+)([kMG]?)", m.group(7)):
            counters[k] = float(v) * SUFFIX[suf]
        row = {
            "real_ns": float(m.group(2)) * UNIT_NS[m.group(3)],
            "cpu_ns": float(m.group(4)) * UNIT_NS[m.group(5)],
            "counters": counters,
        }
        rows[m.group(1)] = row  # the full name, arguments included
        rows[m.group(1).split("/")[0]] = row  # and the bare name (the last of its arguments)
    return rows


def probe_phases(text):
    """probes_bench's table: phase -> (wall ns, cpu ns) per cuLaunchKernel call."""
    phases = {}
    inside = False
    for line in (text or "").splitlines():
        if line.startswith("ns per cuLaunchKernel call"):
            inside = True
            continue
        if inside:
            m = re.match(r"^\s+([a-z_]+)\s+([\d.]+)\s+([\d.]+)\s", line)
            if m:
                phases[m.group(1)] = (float(m.group(2)), float(m.group(3)))
            elif phases:
                break
    return phases


def agent_cost(text):
    """measure-agent-cost.sh: cores, RSS median, RSS p95, lines lost."""
    if not text:
        return None
    out = {}
    m = re.search(r"agent cost over ([\d.]+) s at \S+: ([\d.]+) cores average", text)
    if m:
        out["seconds"] = float(m.group(1))
        out["cores"] = float(m.group(2))
    m = re.search(r"median ([\d.]+) MiB, 95th percentile ([\d.]+) MiB, max ([\d.]+) MiB", text)
    if m:
        out["rss_median"], out["rss_p95"], out["rss_max"] = (float(m.group(i)) for i in (1, 2, 3))
    m = re.search(r"job output: (\d+) lines captured, lost records (\d+)", text)
    if m:
        out["lines"], out["lost"] = int(m.group(1)), int(m.group(2))
    return out if "cores" in out and "rss_median" in out else None


def machine():
    model = ""
    cpuinfo = read("/proc/cpuinfo") or ""
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    if m:
        model = m.group(1).strip()
    return f"{model or platform.processor()}, {os.cpu_count()} cores, Linux {platform.release()}"


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    d = sys.argv[1]
    table = []   # (figure, ours, baseline, ratio, target, met)
    missing = []

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "-"

    def met(ok):
        return "yes" if ok else "NO"

    # The agent, against the budget and the exporters people run.
    for name, label in (("agent-quiet", "quiet node"), ("agent-job", "job printing 10,000 lines/s")):
        a = agent_cost(read(os.path.join(d, name + ".txt")))
        if a is None:
            missing.append(f"agent, {label} ({name}.txt: scripts/measure-agent-cost.sh output)")
            continue
        table.append((f"agent RSS median, {label} ({a['seconds']:.0f} s)", f"{a['rss_median']:.1f} MiB",
                      f"budget {AGENT_RSS_BUDGET_MIB} MiB; dcgm-exporter ~{DCGM_EXPORTER_MIB} MiB (published)",
                      ratio(a["rss_median"], AGENT_RSS_BUDGET_MIB), f"<= {AGENT_RSS_BUDGET_MIB} MiB",
                      met(a["rss_median"] <= AGENT_RSS_BUDGET_MIB)))
        table.append((f"agent CPU, {label}", f"{a['cores']:.4f} cores", "dcgm-exporter 0.15-0.20 (published)",
                      ratio(a["cores"], 0.15), "<= 0.15", met(a["cores"] <= 0.15)))
        if "lost" in a:
            table.append(("  job-output lines captured / lost", f"{a['lines']:,} / {a['lost']:,}", "", "", "0 lost",
                          met(a["lost"] == 0)))

    # The probes, against an empty uprobe on the same function, in the same run.
    phases = probe_phases(read(os.path.join(d, "probes_bench.txt")))
    if "probes" in phases and "empty_uprobe" in phases:
        ours, base = phases["probes"][1], phases["empty_uprobe"][1]
        table.append(("probed cuLaunchKernel, CPU ns/call", f"{ours:,.0f}", f"empty uprobe {base:,.0f}",
                      ratio(ours, base), "<= 1.5x", met(ours <= 1.5 * base)))
        if "empty_uprobe_push" in phases:
            # The same empty program where the first instruction is emulated (no single-step):
            # what a probe hit costs when the driver's function starts that way.
            push = phases["empty_uprobe_push"][1]
            table.append(("  empty uprobe on an emulated push", f"{push:,.0f}", "", "", "", ""))
        if "unprobed" in phases:
            table.append(("  unprobed call, CPU ns", f"{phases['unprobed'][1]:,.0f}", "", "", "", ""))
    else:
        missing.append("probes vs empty uprobe (probes_bench.txt: needs root and the probes_bench target)")

    # The store, against a plain uncompressed ring and the shared reference figures.
    rows = gbench_rows(read(os.path.join(d, "store_bench.txt")))
    st, ring = rows.get("BM_Ingest_Store"), rows.get("BM_Ingest_PlainRing")
    if st and ring and "bytes_per_sample_in_memory" in st["counters"]:
        b = st["counters"]["bytes_per_sample_in_memory"]
        table.append(("store bytes/sample in memory", f"{b:.3f}",
                      f"plain ring {ring['counters'].get('bytes_per_sample_in_memory', 16):.0f}; "
                      f"Prometheus {PROMETHEUS_BYTES_PER_SAMPLE} (published)",
                      ratio(b, PROMETHEUS_BYTES_PER_SAMPLE) + " Prom", "<= 0.6", met(b <= 0.6)))
        si, ri = st["counters"].get("items_per_second"), ring["counters"].get("items_per_second")
        if si and ri:
            table.append(("store insert, ns/sample", f"{1e9 / si:.1f}", f"plain ring {1e9 / ri:.1f}",
                          ratio(ri, si), "no slower than before", "see docs"))
    else:
        missing.append("store ingest (store_bench.txt: BM_Ingest_Store, BM_Ingest_PlainRing)")
    qs, qr = rows.get("BM_Query1h1000Series_Store"), rows.get("BM_Query1h1000Series_PlainRing")
    if qs and qr:
        table.append(("store query, 1 h x 1,000 series", f"{qs['real_ns'] / 1e6:.0f} ms",
                      f"plain ring {qr['real_ns'] / 1e6:.0f} ms", ratio(qs["real_ns"], qr["real_ns"]),
                      "no slower than before", "see docs"))
    else:
        missing.append("store query (store_bench.txt: BM_Query1h1000Series_Store/_PlainRing)")
    disk = rows.get("BM_DiskBytesPerSample")
    if disk and "bytes_per_sample_compacted" in disk["counters"]:
        b = disk["counters"]["bytes_per_sample_compacted"]
        table.append(("store bytes/sample on disk, compacted", f"{b:.3f}",
                      f"VictoriaMetrics {VICTORIA_BYTES_PER_SAMPLE} (published)",
                      ratio(b, VICTORIA_BYTES_PER_SAMPLE) + " VM", "<= 0.45", met(b <= 0.45)))
    else:
        missing.append("store on disk (store_bench.txt: BM_DiskBytesPerSample)")

    # The event log: sealed blocks against the same events held one packed entry each.
    rows = gbench_rows(read(os.path.join(d, "event_log_bench.txt")))
    sealed, unsealed = rows.get("BM_EventLogAppend/sealed:1"), rows.get("BM_EventLogAppend/sealed:0")
    if sealed and unsealed and "bytes_per_event" in sealed["counters"]:
        b, u = sealed["counters"]["bytes_per_event"], unsealed["counters"].get("bytes_per_event", 0)
        table.append(("event log bytes/event, a job's metrics (15 min)", f"{b:.1f}", f"unsealed {u:.0f}",
                      ratio(b, u), "< unsealed", met(b < u)))
        table.append(("event log append, ns/event", f"{sealed['cpu_ns'] / sealed['counters'].get('events', 1):.0f}",
                      f"unsealed {unsealed['cpu_ns'] / unsealed['counters'].get('events', 1):.0f}",
                      ratio(sealed["cpu_ns"], unsealed["cpu_ns"]), "", ""))
        qs, qu = rows.get("BM_EventLogQueryJobMetrics/sealed:1"), rows.get("BM_EventLogQueryJobMetrics/sealed:0")
        if qs and qu:
            table.append(("event log query, a job's metrics over 15 min", f"{qs['cpu_ns'] / 1e6:.1f} ms",
                          f"unsealed {qu['cpu_ns'] / 1e6:.1f} ms", ratio(qs["cpu_ns"], qu["cpu_ns"]), "", ""))
    else:
        missing.append("event log (event_log_bench.txt: BM_EventLogAppend/sealed:1 and /sealed:0)")

    print(f"\nmake bench: issue 28's figures beside their baselines, this run ({machine()})")
    header = ("figure", "ours", "baseline (same run unless 'published')", "ratio", "target", "met")
    widths = [max(len(r[i]) for r in table + [header]) for i in range(len(header))]
    for r in [header] + table:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for m in missing:
        print(f"  MISSING: {m}")
    print("Every benchmark's own output is in " + d + "/ (docs/performance.md says how to read each).")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
