#!/usr/bin/env python3
# tools/device/ncu_summary.py - one table per profile from Nsight Compute's
# raw CSV (`ncu --csv --page raw --print-units base --metrics ...`, what
# tools/device/run.sh's `kernels` step writes): each kernel (by function
# name, template arguments kept) with its launches, total and mean time, and
# the time-weighted means of DRAM and SM throughput (% of peak) and of the
# achieved occupancy, its registers a thread and its first launch's grid and
# block. Which kernels are far from the memory bandwidth they need, and why
# (occupancy, registers), is what the per-op table (gpu_bench --profile)
# cannot say: LayerNorm's backward is three kernels, the flash backward two.
# Must not: need ncu or a GPU itself (it reads a file, so it runs anywhere).
#
#   python3 tools/device/ncu_summary.py ncu.csv [--top 40] [--json out.json]

import argparse
import csv
import json
import re
import sys

TIME = "gpu__time_duration.sum"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
REGS = "launch__registers_per_thread"
METRICS = [TIME, DRAM, SM, OCC, REGS]
SCALE_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
            "second": 1e9, "s": 1e9}


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def short_name(name):
    """A kernel's function name with its template arguments, without its
    parameter list and return type: 'void k<bf16, 64>(float *, int)' -> 'k<bf16, 64>'."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut].strip()
    return re.sub(r"^(void|static|__global__)\s+", "", name)


def read(path):
    """The kernel rows of an ncu raw CSV: a list of dicts with the metrics
    as floats (times in nanoseconds). Lines that are not the CSV (ncu's
    ==PROF== lines, the program's own output) are skipped."""
    with open(path, newline="", errors="replace") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows = list(csv.reader(lines))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        raise ValueError("%s: no ncu CSV header (a row naming \"Kernel Name\")" % path)
    cols = rows[head]
    units = rows[head + 1] if head + 1 < len(rows) else []
    at = {c: i for i, c in enumerate(cols)}
    missing = [m for m in (TIME,) if m not in at]
    if missing:
        raise ValueError("%s: the CSV lacks %s" % (path, ", ".join(missing)))
    scale = SCALE_NS.get(units[at[TIME]] if at[TIME] < len(units) else "nsecond", None)
    if scale is None:
        raise ValueError("%s: unknown time unit %r" % (path, units[at[TIME]]))
    out = []
    for r in rows[head + 2:]:
        if len(r) != len(cols) or r == cols:
            continue
        t = number(r[at[TIME]])
        if t is None:
            continue
        k = {"name": short_name(r[at["Kernel Name"]]), "ns": t * scale,
             "grid": r[at["Grid Size"]] if "Grid Size" in at else "",
             "block": r[at["Block Size"]] if "Block Size" in at else ""}
        for m in (DRAM, SM, OCC, REGS):
            k[m] = number(r[at[m]]) if m in at else None
        out.append(k)
    return out


def summarize(kernels):
    """Per kernel name: launches, total/mean time, time-weighted means."""
    by = {}
    for k in kernels:
        s = by.setdefault(k["name"], {"name": k["name"], "launches": 0, "ns": 0.0, "grid": k["grid"],
                                      "block": k["block"], "regs": k[REGS],
                                      "w": {DRAM: [0.0, 0.0], SM: [0.0, 0.0], OCC: [0.0, 0.0]}})
        s["launches"] += 1
        s["ns"] += k["ns"]
        for m in (DRAM, SM, OCC):
            if k[m] is not None:
                s["w"][m][0] += k[m] * k["ns"]
                s["w"][m][1] += k["ns"]
    rows = []
    for s in by.values():
        w = s.pop("w")
        for m, key in ((DRAM, "dram_pct"), (SM, "sm_pct"), (OCC, "occupancy_pct")):
            s[key] = w[m][0] / w[m][1] if w[m][1] > 0 else None
        rows.append(s)
    rows.sort(key=lambda s: -s["ns"])
    return rows


def table(rows, top):
    total = sum(s["ns"] for s in rows)
    pct = lambda v: "-" if v is None else "%.0f" % v
    out = ["| kernel | launches | total ms | share | mean us | DRAM % | SM % | occupancy % | regs | grid x block |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for s in rows[:top]:
        out.append("| %s | %d | %.3f | %.1f%% | %.1f | %s | %s | %s | %s | %s x %s |" % (
            s["name"].replace("|", "\\|"), s["launches"], s["ns"] / 1e6, 100 * s["ns"] / total if total else 0,
            s["ns"] / s["launches"] / 1e3, pct(s["dram_pct"]), pct(s["sm_pct"]), pct(s["occupancy_pct"]),
            "-" if s["regs"] is None else "%.0f" % s["regs"], s["grid"], s["block"]))
    if len(rows) > top:
        rest = rows[top:]
        out.append("| (%d more kernels) | %d | %.3f | %.1f%% | | | | | | |" % (
            len(rest), sum(s["launches"] for s in rest), sum(s["ns"] for s in rest) / 1e6,
            100 * sum(s["ns"] for s in rest) / total if total else 0))
    out.append("")
    out.append("%d launches of %d kernels, %.3f ms in all (each launch timed alone, as ncu replays it)" % (
        sum(s["launches"] for s in rows), len(rows), total / 1e6))
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description="a table per kernel from ncu's raw CSV")
    p.add_argument("csv", nargs="+", help="ncu --csv --page raw outputs")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args()
    everything = {}
    for path in a.csv:
        try:
            rows = summarize(read(path))
        except (OSError, ValueError) as e:
            print("ncu_summary: %s" % e, file=sys.stderr)
            return 1
        print("### %s\n\n%s\n" % (path, table(rows, a.top)))
        everything[path] = rows
    if a.json:
        with open(a.json, "w") as f:
            json.dump(everything, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
