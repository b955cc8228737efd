#!/usr/bin/env python3
"""Cache lines and pages one cold call touches: pvmm's path against the raw driver call (pvmm-own-cost's cold rows).

Runs `pvmm-own-cost --lines [row]` under valgrind's lackey (--trace-mem=yes: every instruction fetch and data access
the program makes, with its address and size), reads the trace from a pipe and keeps only the accesses made between
the marks pvmm-own-cost puts around each measured call (valgrind client requests; the same operation lambdas the
cold table times, so the std::function call around the operation is on both sides). For each call it counts the
distinct 64-byte lines and distinct 4 KiB pages touched, instruction fetches and data apart. After a cold table's
8 MiB stream every one of them is a cache miss (L1/L2), and every page a first-level TLB miss; the counts are
deterministic, unlike the cold timings on a shared VM.

Usage: tools/own-cost-lines.py [--binary build/cuda/tools/pvmm-own-cost] [--row reserve] [--functions]
  --mangled    symbols not demangled (the names cmake/hot_layout.ld's patterns match)
  --functions  also lists, per call, the functions (nm symbols) whose code lines were fetched and the data symbols
               whose lines were touched, with the line counts.
A function of libpvmm that a call executes outside the hot section (cmake/hot_layout.ld: one renamed, or new) is
named on a line of its own. Each side runs 4 unmarked rounds of 64 calls (as the cold table's earlier rounds: the state cache and the registry
shards' tables are filled), then one more with its last 4 calls marked; the counts printed are the last call's, and
a note is printed where the four differ.
"""
import argparse
import bisect
import collections
import os
import re
import subprocess
import sys

LINE, PAGE = 64, 4096
STACK_SPAN = 1 << 16  # lines within 64 KiB of the marked frame count as the stack's


class Objects:
    """The loaded objects' segments (from the marks) and their symbols (from nm), to name an address."""

    def __init__(self):
        self.segments = []  # (start, end, bias, path)
        self.symbols = {}  # path -> (sorted addresses, names)

    def add(self, start, end, bias, path):
        self.segments.append((start, end, bias, path))

    def find(self, addr):
        for start, end, bias, path in self.segments:
            if start <= addr < end:
                return bias, path
        return None, None

    def symbol(self, addr):
        bias, path = self.find(addr)
        if path is None:
            return None
        if path not in self.symbols:
            self.symbols[path] = self._load(path)
        addrs, names = self.symbols[path]
        i = bisect.bisect_right(addrs, addr - bias) - 1
        return f"{names[i]}+{addr - bias - addrs[i]:#x}" if i >= 0 else f"? {addr - bias:#x}"

    @staticmethod
    def _load(path):
        real = path if path != "(main)" else ARGS.binary
        out = ""
        for dynamic in ([], ["-D"]):  # a stripped library (libc) names its exported functions only
            try:
                out = subprocess.run(["nm", "-n", "--defined-only"] + ([] if ARGS.mangled else ["-C"]) + dynamic + [real], capture_output=True,
                                     text=True).stdout
            except OSError:
                pass
            if out.strip():
                break
        addrs, names = [], []
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "tTwWdDbBrRvV":
                addrs.append(int(parts[0], 16))
                names.append(parts[2])
        return addrs, names


def hot_section(objects):
    """(start, end) of libpvmm's .text.pvmm_hot (cmake/hot_layout.ld) at its load address, or None."""
    for start, end, bias, path in objects.segments:
        if "libpvmm" not in os.path.basename(path):
            continue
        out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
        m = re.search(r"\.text\.pvmm_hot\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", out)
        return (bias + int(m.group(1), 16), bias + int(m.group(1), 16) + int(m.group(2), 16)) if m else None
    return None


def region(objects, addr, frame):
    if frame is not None and abs(addr - frame) < STACK_SPAN:
        return "stack"
    _, path = objects.find(addr)
    if path is None:
        return "heap/anon"
    return os.path.basename(path).split(".so")[0]


class Call:
    def __init__(self, row, side, index, frame):
        self.row, self.side, self.index, self.frame = row, side, index, frame
        self.code, self.data = {}, {}  # line number (address >> 6) -> the first address touched in it (names it)

    @staticmethod
    def lines(addr, size):
        return range(addr // LINE, (addr + max(size, 1) - 1) // LINE + 1)

    def counts(self):
        return (len(self.code), len({l * LINE // PAGE for l in self.code}), len(self.data),
                len({l * LINE // PAGE for l in self.data}))


def trace(binary, row):
    read, write = os.pipe()
    cmd = ["valgrind", "--tool=lackey", "--trace-mem=yes", f"--log-fd={write}", binary, "--lines"] + ([row] if row else [])
    proc = subprocess.Popen(cmd, pass_fds=(write,), stdout=subprocess.DEVNULL)
    os.close(write)
    objects, calls, current = Objects(), [], None
    access = re.compile(rb"^ ?([ILSM]) +([0-9a-f]+),(\d+)")
    with os.fdopen(read, "rb", buffering=1 << 20) as log:
        for raw in log:
            if raw.startswith(b"**"):
                text = raw.split(b"** ", 1)[1].decode().split()
                if text[0] == "own-cost-object":
                    objects.add(int(text[1], 16), int(text[2], 16), int(text[3], 16), text[4])
                elif text[0] == "own-cost-begin":
                    current = Call(text[1], text[2], int(text[3]), int(text[4], 16))
                elif text[0] == "own-cost-end":
                    calls.append(current)
                    current = None
                continue
            if current is None:
                continue
            m = access.match(raw)
            if not m:
                continue
            kind, addr, size = m.group(1), int(m.group(2), 16), int(m.group(3))
            touched = current.code if kind == b"I" else current.data
            for l in Call.lines(addr, size):
                touched.setdefault(l, max(addr, l * LINE))
    if proc.wait() != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}")
    return objects, calls


def by_region(objects, call, lines):
    """'object lines/pages' for each region the lines fall in, most lines first."""
    count, pages = collections.Counter(), collections.defaultdict(set)
    for l in lines:
        where = region(objects, l * LINE, call.frame)
        count[where] += 1
        pages[where].add(l * LINE // PAGE)
    return " ".join(f"{k} {v}/{len(pages[k])}p" for k, v in sorted(count.items(), key=lambda kv: -kv[1]))


def by_symbol(objects, call, lines):
    count = collections.Counter()
    for l, first in lines.items():
        where = region(objects, first, call.frame)
        count[where if where in ("stack", "heap/anon") else f"{where}: {objects.symbol(first)}"] += 1
    return count


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default="build/cuda/tools/pvmm-own-cost")
    p.add_argument("--row", default="")
    p.add_argument("--functions", action="store_true")
    p.add_argument("--mangled", action="store_true", help="symbols as the linker sees them (for cmake/hot_layout.ld)")
    ARGS = p.parse_args()
    objects, calls = trace(ARGS.binary, ARGS.row)
    hot = hot_section(objects)
    if hot is None:
        print("(no .text.pvmm_hot in libpvmm: the linker did not take cmake/hot_layout.ld)")
    rows = collections.OrderedDict()
    for c in calls:
        rows.setdefault(c.row, collections.defaultdict(list))[c.side].append(c)
    print("distinct 64-byte lines and 4 KiB pages one call touches (lackey trace, the last of 4 marked calls)")
    print(f"  {'operation':<12} {'side':<6} {'code lines':>10} {'code pages':>10} {'data lines':>10} "
          f"{'data pages':>10}   where (lines/pages)")
    for name, sides in rows.items():
        last = {}
        for side in ("pvmm", "raw"):
            marked = sides[side]
            c = marked[-1]
            last[side] = c.counts()
            varies = len({m.counts() for m in marked}) > 1
            print(f"  {name:<12} {side:<6} {last[side][0]:>10} {last[side][1]:>10} {last[side][2]:>10} "
                  f"{last[side][3]:>10}   code: {by_region(objects, c, c.code)}; data: {by_region(objects, c, c.data)}"
                  + ("  (the 4 calls differ: " + ", ".join(str(m.counts()) for m in marked) + ")" if varies else ""))
        c = sides["pvmm"][-1]
        if hot is not None:
            outside = collections.Counter(objects.symbol(f).rsplit("+", 1)[0] for f in c.code.values()
                                          if region(objects, f, c.frame).startswith("libpvmm")
                                          and not hot[0] <= f < hot[1])
            if outside:
                print(f"  {name:<12} pvmm's code outside .text.pvmm_hot (add to cmake/hot_layout.ld): "
                      + ", ".join(f"{sym[:80]} ({n} lines)" for sym, n in outside.most_common()))
        added = [a - b for a, b in zip(last["pvmm"], last["raw"])]
        print(f"  {name:<12} {'added':<6} {added[0]:>10} {added[1]:>10} {added[2]:>10} {added[3]:>10}")
        if ARGS.functions:
            c = sides["pvmm"][-1]
            for title, lines in (("code", c.code), ("data", c.data)):
                print(f"    pvmm {name}, {title} lines by symbol:")
                for sym, n in sorted(by_symbol(objects, c, lines).items(), key=lambda kv: -kv[1]):
                    print(f"      {n:>3}  {sym[:150]}")


if __name__ == "__main__":
    main()
