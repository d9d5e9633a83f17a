#!/usr/bin/env python3
"""Prints ottr's bench CSV beside the peers' JSON lines (peers.py output) with ratios, one table
per precision: ottr's tf32 rows against the peers' TF32 modes (torch eager_tf32, graph_full,
jax jit), fp32 against torch eager_fp32, bf16 against torch eager_bf16 and jax jit_bf16, fp16
alone; then, from ottr_unfused.csv, the fusion passes' before/after table.
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


def group(mode):
    """The precision a peer mode runs in."""
    if "bf16" in mode:
        return "bf16"
    if "fp16" in mode:
        return "fp16"
    if "fp32" in mode:
        return "fp32"
    return "tf32"  # eager_tf32, graph_full, compile_default, jit


for precision in ("tf32", "fp32", "bf16", "fp16"):
    ottr = {r["model"]: r for r in rows if r["precision"] == precision}
    cols = sorted({k for m in peers.values() for k in m if group(k) == precision})
    if not ottr and not cols:
        continue
    print(f"\n{precision}:\n")
    print("| model | ottr µs/step | launches | ottr peak MB |" + "".join(f" {c} µs (ratio) |" for c in cols))
    print("|" + " --- |" * (4 + len(cols)))
    for model, r in ottr.items():
        us = float(r["us_per_step"])
        cells = []
        for c in cols:
            p = peers.get(model, {}).get(c)
            cells.append(f"{p['us_per_step']} ({p['us_per_step'] / us:.2f}x)" if p else "-")
        print(f"| {model} | {us:.1f} | {r['launches_per_step']} | {int(r['peak_bytes']) / 1e6:.0f} |" +
              "".join(f" {c} |" for c in cells))
    # Models the peers ran but ottr did not, the peers' times alone: "failed" when ottr ran this
    # precision for other models, "not run" when it ran none (COMPARE_PRECISIONS left it out).
    status = "failed" if ottr else "not run"
    for model in sorted(m for m in peers if m not in ottr and any(c in peers[m] for c in cols)):
        cells = [str(peers[model][c]["us_per_step"]) if c in peers[model] else "-" for c in cols]
        print(f"| {model} | {status} | - | - |" + "".join(f" {c} |" for c in cells))

# Fusion before/after (TF32): ottr_unfused.csv holds the same models with --fuse-epilogues off.
unfused_csv = os.path.join(d, "ottr_unfused.csv")
if os.path.exists(unfused_csv):
    fused = {r["model"]: r for r in rows if r["precision"] == "tf32"}
    print("\nfusion passes (TF32), without -> with:\n")
    print("| model | µs/step | launches | launches removed | peak MB |")
    print("| --- | --- | --- | --- | --- |")
    for r in csv.DictReader(open(unfused_csv)):
        f = fused.get(r["model"])
        if not f:
            continue
        l0, l1 = int(r["launches_per_step"]), int(f["launches_per_step"])
        print(f"| {r['model']} | {float(r['us_per_step']):.1f} -> {float(f['us_per_step']):.1f} | {l0} -> {l1} | "
              f"{100.0 * (l0 - l1) / l0:.0f}% | {int(r['peak_bytes']) / 1e6:.0f} -> {int(f['peak_bytes']) / 1e6:.0f} |")
print("\nratio = peer µs / ottr µs (above 1: ottr is faster)")
