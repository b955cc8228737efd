#!/usr/bin/env python3
"""Cost guard: instructions per call of pvmm's warm paths against the null driver, counted (not timed), compared with
the committed baseline (tools/own-cost-baseline.txt); a rise of more than 10 % fails.

Runs `pvmm-own-cost --count` (the cuda build: its driver table swapped for the fake driver's, so no GPU is needed)
under valgrind's callgrind with collection off except inside each row's timed part (own_cost.hpp's timed() toggles
it), so only the measured calls are counted: the same operation lambdas pvmm-own-cost times, each row's pvmm side
and raw side (the same driver calls straight through the table). Each round is dumped on its own
(CALLGRIND_DUMP_STATS_AT "<row>|<side>|<n>"); a row's figure is the median over its rounds of
(pvmm - raw) / n: the instructions pvmm adds to one call. Instruction counts do not depend on the host's load, so
a shared CI machine cannot hide a regression in noise, nor invent one.

Usage: tools/cost-guard.py [--binary build/cuda/tools/pvmm-own-cost] [--baseline tools/own-cost-baseline.txt]
                           [--update] [--tolerance 10]
  --update   writes the measured figures as the new baseline (commit it with the change that explains it)
"""
import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(binary):
    with tempfile.TemporaryDirectory(prefix="pvmm-cost-guard-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
               binary, "--count"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"cost-guard: {' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
        rounds = {}  # (row, side, n) -> [instructions]
        for dump in glob.glob(out + "*"):
            text = open(dump, encoding="utf-8", errors="replace").read()
            trigger = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if not trigger or "|" not in trigger.group(1):
                continue  # the final dump at exit (nothing collected there)
            row, side, n = trigger.group(1).rsplit("|", 2)
            rounds.setdefault((row, side, int(n)), []).append(int(total.group(1)) if total else 0)
    if not rounds:
        sys.exit("cost-guard: callgrind wrote no per-row dumps (was pvmm-own-cost built with valgrind/callgrind.h?)")
    rows = {}
    for (row, side, n), counts in rounds.items():
        if side != "pvmm":
            continue
        raw = rounds.get((row, "raw", n), [0] * len(counts))
        rows[row] = (statistics.median((p - r) / n for p, r in zip(sorted(counts), sorted(raw))),
                     statistics.median(c / n for c in counts), statistics.median(c / n for c in raw))
    return rows


def read_baseline(path):
    base = {}
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            line = line.strip()
            if line and not line.startswith("#"):
                row, value = line.rsplit("\t", 1)
                base[row] = float(value)
    return base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/cuda/tools/pvmm-own-cost")
    ap.add_argument("--baseline", default=os.path.join(HERE, "own-cost-baseline.txt"))
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--tolerance", type=float, default=10.0, help="allowed rise, percent")
    args = ap.parse_args()
    rows = measure(args.binary)
    base = read_baseline(args.baseline)
    print(f"cost-guard: instructions pvmm adds per call (callgrind, null driver; median of rounds), "
          f"limit +{args.tolerance:g} % over {os.path.relpath(args.baseline)}")
    print(f"  {'operation':<28} {'added':>8} {'baseline':>9} {'change':>8}   {'pvmm':>8} {'raw':>6}")
    failed = []
    for row, (added, pvmm, raw) in sorted(rows.items()):
        was = base.get(row)
        change = "new" if was is None else f"{(added - was) / max(was, 1.0) * 100:+.1f} %"
        over = was is not None and added > was * (1 + args.tolerance / 100) + 0.5
        print(f"  {row:<28} {added:>8.1f} {'-' if was is None else f'{was:.1f}':>9} {change:>8}   "
              f"{pvmm:>8.1f} {raw:>6.1f}{'  <-- above the limit' if over else ''}")
        if over:
            failed.append(row)
    missing = sorted(set(base) - set(rows))
    if missing:
        print(f"cost-guard: rows in the baseline no longer measured: {', '.join(missing)}")
    if args.update:
        with open(args.baseline, "w", encoding="utf-8") as f:
            f.write("# Instructions pvmm adds per warm call against the null driver (tools/cost-guard.py --update).\n"
                    "# row<TAB>instructions; CI fails when a row rises more than 10 % above its figure here.\n")
            for row, (added, _, _) in sorted(rows.items()):
                f.write(f"{row}\t{added:.1f}\n")
        print(f"cost-guard: baseline written to {args.baseline}")
        return 0
    if failed:
        print(f"cost-guard: FAILED: {', '.join(failed)} rose more than {args.tolerance:g} % (if intended, rerun with "
              f"--update and commit the baseline with the reason)")
        return 1
    print(f"cost-guard: {len(rows)} rows within {args.tolerance:g} % of the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
