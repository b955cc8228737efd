"""Python bench (issue 36 item 8): prints a Markdown table. On a GPU machine (cuda build of the package, torch):
    python python/bench/bench.py --gib 8
On the host backend it measures only what has no GPU in it (pvmm's Python cost per call; growth and sleep/wake on
host memory), with --gib small. Each comparison that needs a fresh allocator configuration runs in a subprocess.

Rows: growth to N GiB (pvmm GrowableBuffer in place vs torch with expandable segments vs torch's default
cudaMalloc + copy), allocate/free through the torch plug-in vs torch's caching allocator, sleep/wake of N GiB
(time, memory freed) vs the same by hand on the raw calls, pvmm's Python cost per call."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import pvmm

MIB = 1 << 20
STEP = 64 * MIB


def now() -> float:
    return time.perf_counter()


def growth_pvmm(total: int) -> dict:
    g = pvmm.GrowableBuffer.create(chunk_size=STEP, reserve_size=total)
    t = now()
    moves = 0
    for size in range(STEP, total + 1, STEP):
        moves += g.resize(size)["moved"]
    return {"seconds": now() - t, "moves": moves}


def growth_torch(total: int, expandable: bool) -> dict:
    """In a subprocess: PYTORCH_CUDA_ALLOC_CONF must be set before torch initialises CUDA."""
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" if expandable else ""
    code = f"""
import time, torch, json
total, step = {total}, {STEP}
t = time.perf_counter()
cur = torch.empty(step, dtype=torch.uint8, device="cuda")
for size in range(2 * step, total + 1, step):
    nxt = torch.empty(size, dtype=torch.uint8, device="cuda")
    nxt[: cur.numel()].copy_(cur)
    cur = nxt
torch.cuda.synchronize()
print(json.dumps({{"seconds": time.perf_counter() - t, "peak": torch.cuda.max_memory_reserved()}}))
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def alloc_free_torch(n: int) -> dict:
    import torch

    from pvmm import allocators

    res = {}
    t = now()
    for _ in range(n):
        x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        del x
    torch.cuda.synchronize()
    res["caching allocator us/op"] = (now() - t) / n * 1e6
    pool = pvmm.MemoryPool.create()
    mp = allocators.torch_mem_pool(pool)
    with torch.cuda.use_mem_pool(mp):
        t = now()
        for _ in range(n):
            x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
            del x
        torch.cuda.synchronize()
    res["pvmm pool plug-in us/op"] = (now() - t) / n * 1e6
    return res


def free_memory() -> int | None:
    try:
        import torch

        if torch.cuda.is_available() and pvmm.BACKEND != "host":
            return int(torch.cuda.mem_get_info()[0])
    except ImportError:
        pass
    return None


def sleep_wake(total: int) -> dict:
    s = pvmm.SleepingAllocator()
    chunk = 512 * MIB if total >= 512 * MIB else total
    addrs = [s.allocate(chunk, "w") for _ in range(max(1, total // chunk))]
    before = free_memory()
    t = now()
    s.sleep(["w"], offload=True)
    slept = now() - t
    during = free_memory()
    t = now()
    s.wake(["w"])
    woke = now() - t
    res = {"sleep s (offload)": slept, "wake s (restore)": woke}
    if before is not None and during is not None:
        res["GiB freed while asleep"] = (during - before) / (1 << 30)
    for a in addrs:
        s.free(a)
    s.close()
    # by hand on the raw calls: reserve + map, then unmap + release, then create + map again (no copies)
    size = pvmm.granularity()[0] * max(1, chunk // pvmm.granularity()[0])
    ranges = []
    for _ in range(max(1, total // chunk)):
        r = pvmm.Reservation.reserve(size)
        p = pvmm.PhysicalAllocation.create(size)
        r.map(0, p)
        p.close()
        ranges.append(r)
    t = now()
    for r in ranges:
        r.unmap(0, size)
    for r in ranges:
        p = pvmm.PhysicalAllocation.create(size)
        r.map(0, p)
        p.close()
    res["by hand unmap+remap s (no copies)"] = now() - t
    return res


def per_call(n: int = 20000) -> dict:
    s = pvmm.Stream.create()
    pool = pvmm.MemoryPool.create()
    p = pool.allocate_async(4096, s)
    res = {}
    t = now()
    for _ in range(n):
        pvmm.query_pointer(p)
    res["query_pointer us"] = (now() - t) / n * 1e6
    t = now()
    for _ in range(n):
        q = pool.allocate_async(4096, s)
        pool.free_async(q, s)
    res["pool allocate_async+free_async us"] = (now() - t) / n * 1e6
    t = now()
    for _ in range(n):
        s.synchronize()
    res["stream.synchronize (idle) us"] = (now() - t) / n * 1e6
    pool.free_async(p, s)
    s.synchronize()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=8.0 if pvmm.BACKEND != "host" else 0.25)
    args = ap.parse_args()
    total = int(args.gib * (1 << 30)) // STEP * STEP
    rows: list[tuple[str, str]] = [("device", json.dumps(pvmm.backend()["name"]) + " " + pvmm.device(0)["name"])]
    rows.append((f"growth to {args.gib} GiB, pvmm GrowableBuffer", json.dumps(growth_pvmm(total))))
    gpu = pvmm.BACKEND != "host"
    if gpu:
        rows.append((f"growth to {args.gib} GiB, torch expandable segments", json.dumps(growth_torch(total, True))))
        rows.append((f"growth to {args.gib} GiB, torch cudaMalloc + copy", json.dumps(growth_torch(total, False))))
        rows.append(("alloc/free 1 MiB x 10000, torch", json.dumps(alloc_free_torch(10000))))
    rows.append((f"sleep/wake {args.gib} GiB", json.dumps(sleep_wake(total))))
    rows.append(("pvmm Python cost per call", json.dumps(per_call())))
    print("| measurement | result |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
