#!/usr/bin/env python3
"""Prints ottr's bench CSV beside the peers' JSON lines (peers.py output) with ratios.
usage: compare_table.py DIR   (DIR holds ottr.csv and peers_*.jsonl; either may be missing)"""
import csv
import glob
import json
import os
import sys

d = sys.argv[1]
ottr_csv = os.path.join(d, "ottr.csv")
ottr = {r["model"]: r for r in csv.DictReader(open(ottr_csv))} if os.path.exists(ottr_csv) else {}
peers = {}
for f in glob.glob(os.path.join(d, "peers_*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        key = r["peer"].split()[0] + " " + r["mode"]
        peers.setdefault(r["model"], {})[key] = r
cols = sorted({k for m in peers.values() for k in m})
print("| model | ottr µs/step | launches | ottr peak MB | " + " | ".join(f"{c} µs (ratio)" for c in cols) + " |")
print("|" + " --- |" * (4 + len(cols)))
for model, r in ottr.items():
    us = float(r["us_per_step"])
    cells = []
    for c in cols:
        p = peers.get(model, {}).get(c)
        cells.append(f"{p['us_per_step']} ({p['us_per_step'] / us:.2f}x)" if p else "-")
    print(f"| {model} | {us:.1f} | {r['launches_per_step']} | {int(r['peak_bytes']) / 1e6:.0f} | " + " | ".join(cells) + " |")
# Models the peers ran but ottr did not (its run failed): the peers' times alone.
for model in sorted(m for m in peers if m not in ottr):
    cells = [str(peers[model][c]["us_per_step"]) if c in peers[model] else "-" for c in cols]
    print(f"| {model} | failed | - | - | " + " | ".join(cells) + " |")
print("ratio = peer µs / ottr µs (above 1: ottr is faster)")
