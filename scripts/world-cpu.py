#!/usr/bin/env python3
"""CPU per process name while a command runs (issue 27: what a simulated world costs its machine).

Samples /proc once a second and adds up each process's user+system time by its name (comm), so
rank programs, data-loader workers, agents, burners and anything else on the machine each get a
line: seconds of CPU and cores on average over the run. A process is counted from its start if a
sample sees it; one that starts and ends between two samples is missed (a world's processes live
for its whole run). The machine's other processes are counted too (a busy loop beside the world
shows as `bash`).

Usage: scripts/world-cpu.py [--top N] -- COMMAND [ARG...]
  e.g. scripts/world-cpu.py -- build/sim/ithbat-sim run scenarios/case04-fp8-divergence.yaml \\
           --quick --seed 11 --no-agents --duration-s 60
"""
import argparse
import collections
import os
import subprocess
import sys
import time


def snapshot():
    """(pid, start time) -> (comm, cpu seconds) for every process now."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        close = stat.rfind(")")
        comm = stat[stat.find("(") + 1:close]
        fields = stat[close + 2:].split()
        out[(entry, fields[19])] = (comm, (int(fields[11]) + int(fields[12])) / hz)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=12, help="process names to print (default 12)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is needed (after --)")
    last = snapshot()
    total = collections.Counter()
    start = time.monotonic()
    child = subprocess.Popen(command)
    while True:
        try:
            child.wait(timeout=1)
            done = True
        except subprocess.TimeoutExpired:
            done = False
        now = snapshot()
        for key, (comm, cpu) in now.items():
            total[comm] += cpu - last.get(key, (comm, 0.0))[1] if key in last else cpu
        # A process seen for the first time counts from its start; one that existed before the
        # command started is not charged for its past: the first snapshot is the baseline.
        last = now
        if done:
            break
    elapsed = time.monotonic() - start
    print(f"world-cpu: {elapsed:.0f} s, exit {child.returncode}: {' '.join(command)}", file=sys.stderr)
    for comm, cpu in total.most_common(args.top):
        print(f"{comm:24s} {cpu:8.1f} s  {cpu / elapsed:5.2f} cores", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
