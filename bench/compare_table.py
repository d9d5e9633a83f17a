#!/usr/bin/env python3
"""Prints ottr's bench CSV beside the peers' JSON lines (peers.py output) with ratios, one table
per precision: ottr's tf32/fp32 rows against the peers' TF32 modes (torch eager_tf32, graph_full,
jax jit), its bf16 rows against their bf16 modes (torch eager_bf16, jax jit_bf16).
usage: compare_table.py DIR   (DIR holds ottr.csv and peers_*.jsonl; either may be missing)"""
import csv
import glob
import json
import os
import sys

d = sys.argv[1]
ottr_csv = os.path.join(d, "ottr.csv")
rows = list(csv.DictReader(open(ottr_csv))) if os.path.exists(ottr_csv) else []
peers = {}
for f in glob.glob(os.path.join(d, "peers_*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        key = r["peer"].split()[0] + " " + r["mode"]
        peers.setdefault(r["model"], {})[key] = r


def low(mode):
    return "bf16" in mode or "fp16" in mode


for precision, is_low in (("tf32 / fp32", False), ("bf16", True)):
    ottr = {r["model"]: r for r in rows if (r["precision"] in ("bf16", "fp16")) == is_low}
    cols = sorted({k for m in peers.values() for k in m if low(k) == is_low})
    if not ottr and not cols:
        continue
    print(f"\n{precision}:\n")
    print("| model | ottr µs/step | launches | ottr peak MB | " + " | ".join(f"{c} µs (ratio)" for c in cols) + " |")
    print("|" + " --- |" * (4 + len(cols)))
    for model, r in ottr.items():
        us = float(r["us_per_step"])
        cells = []
        for c in cols:
            p = peers.get(model, {}).get(c)
            cells.append(f"{p['us_per_step']} ({p['us_per_step'] / us:.2f}x)" if p else "-")
        print(f"| {model} | {us:.1f} | {r['launches_per_step']} | {int(r['peak_bytes']) / 1e6:.0f} | " +
              " | ".join(cells) + " |")
    # Models the peers ran but ottr did not (its run failed): the peers' times alone.
    for model in sorted(m for m in peers if m not in ottr and any(c in peers[m] for c in cols)):
        cells = [str(peers[model][c]["us_per_step"]) if c in peers[model] else "-" for c in cols]
        print(f"| {model} | failed | - | - | " + " | ".join(cells) + " |")
print("\nratio = peer µs / ottr µs (above 1: ottr is faster)")
