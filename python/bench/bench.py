"""Python bench (issue 36 item 8): prints a Markdown table, one row per measurement.

On a GPU machine (the package built for cuda, torch; cupy, cuda-python and cuda.core where present):
    python python/bench/bench.py            # growth and sleep/wake of 8 GiB (less if the GPU has less free)
    python python/bench/bench.py --quick    # 1 GiB and fewer repetitions: a smoke run of every row
On the host backend only the rows without a GPU in them run (growth, sleep/wake and per-call cost on host memory).

Rows:
- growth to N GiB in 256 MiB steps: pvmm GrowableBuffer (in place) vs torch with expandable segments (new tensor +
  copy; the segment grows) vs torch's default (cudaMalloc + copy) vs cuda.core's VirtualMemoryResource
  (modify_allocation); time and peak memory. The torch and cuda.core rows run in subprocesses (an allocator
  configuration is fixed when CUDA starts there).
- allocate/free of 1 MiB tensors: torch's caching allocator vs torch.cuda.MemPool over pvmm's pool and over pvmm's
  growable arena (torch caches segments above a plug-in), and the plug-in's C entry points alone.
- sleep/wake of N GiB with offload to pinned host memory: pvmm's SleepingAllocator vs the same by hand on the raw
  driver calls through cuda-python (copy out, unmap, release; create, map, grant, copy back); time and GPU memory
  freed while asleep.
- a reused pinned staging buffer (allocate, copy H2D on a stream, free; 64 KiB and 1 MiB): pvmm.PinnedPool vs
  PyTorch's CachingHostAllocator (torch.empty(n, pin_memory=True), then copy_ into a device tensor or .to("cuda"),
  non_blocking); us per buffer, the final synchronize included. The torch row prints [pvmm-skip] without torch or
  a GPU.
- pvmm's Python cost per call (a Python no-op call for scale).
Every row catches its own failure and prints it in the table: one missing framework does not hide the others."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

import pvmm

MIB = 1 << 20
GIB = 1 << 30
STEP = 256 * MIB  # growth step (as the raw-call measurement in the design notes)
SLEEP_CHUNK = 512 * MIB  # each sleeping allocation
GPU = pvmm.BACKEND != "host"


def now() -> float:
    return time.perf_counter()


def attempt(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception as e:  # the table says what failed, the other rows still run
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}


def free_gpu_memory() -> int | None:
    """Free GPU memory now (cuMemGetInfo through torch), or None without a GPU or torch."""
    if not GPU:
        return None
    try:
        import torch

        return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None
    except ImportError:
        return None


def subprocess_json(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs `code` in a fresh interpreter; its last stdout line is the JSON result."""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode:
        lines = (out.stderr or "failed").strip().splitlines()
        return {"error": lines[-1][:200] if lines else f"exit {out.returncode}"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# ---- growth ------------------------------------------------------------------------------------------------------


def growth_pvmm(total: int) -> dict[str, Any]:
    before = free_gpu_memory()
    g = pvmm.GrowableBuffer.create(chunk_size=STEP, reserve_size=total)
    t = now()
    moves = 0
    for size in range(STEP, total + 1, STEP):
        moves += int(g.resize(size)["moved"])
    seconds = now() - t
    during = free_gpu_memory()
    g.close()
    res: dict[str, Any] = {"ms": round(seconds * 1e3, 2), "moves": moves}
    if before is not None and during is not None:
        res["peak GiB"] = round((before - during) / GIB, 2)
    return res


def growth_torch(total: int, expandable: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" if expandable else "expandable_segments:False"
    code = f"""
import json, time, torch
total, step = {total}, {STEP}
cur = torch.empty(step, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
t = time.perf_counter()
for size in range(2 * step, total + 1, step):
    nxt = torch.empty(size, dtype=torch.uint8, device="cuda")
    nxt[: cur.numel()].copy_(cur)
    cur = nxt
torch.cuda.synchronize()
print(json.dumps({{"ms": round((time.perf_counter() - t) * 1e3, 2),
                  "peak GiB": round(torch.cuda.max_memory_reserved() / 2**30, 2)}}))
"""
    return subprocess_json(code, env)


def growth_cuda_core(total: int) -> dict[str, Any]:
    code = f"""
import json, time
try:
    from cuda.core import Device, VirtualMemoryResource, VirtualMemoryResourceOptions
except ImportError:
    from cuda.core.experimental import Device, VirtualMemoryResource, VirtualMemoryResourceOptions
total, step = {total}, {STEP}
dev = Device(0)
dev.set_current()
mr = VirtualMemoryResource(dev, VirtualMemoryResourceOptions())
buf = mr.allocate(step)
t = time.perf_counter()
for size in range(2 * step, total + 1, step):
    buf = mr.modify_allocation(buf, size)
dev.sync()
print(json.dumps({{"ms": round((time.perf_counter() - t) * 1e3, 2), "size GiB": round(buf.size / 2**30, 2)}}))
"""
    return subprocess_json(code)


# ---- allocate/free through torch --------------------------------------------------------------------------------


def alloc_free_torch(n: int) -> dict[str, Any]:
    import torch

    from pvmm import allocators

    def loop() -> float:
        torch.cuda.synchronize()
        t = now()
        for _ in range(n):
            x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
            del x
        torch.cuda.synchronize()
        return round((now() - t) / n * 1e6, 2)

    res: dict[str, Any] = {"torch caching allocator us/op": loop()}
    for name, source in (("pool", pvmm.MemoryPool.create()), ("arena", pvmm.GrowableArena(reserve_size=4 * GIB))):
        with torch.cuda.use_mem_pool(allocators.torch_mem_pool(source)):
            res[f"MemPool over pvmm {name} us/op"] = loop()
    return res


def entry_points_alone(n: int) -> dict[str, Any]:
    """The plug-in's C entry points called directly (what PyTorch pays per segment), ctypes overhead included."""
    from pvmm import allocators

    lib = ctypes.CDLL(allocators.library_path())
    alloc, free = lib.pvmm_torch_alloc, lib.pvmm_torch_free
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    stream = pvmm.Stream.create()
    res: dict[str, Any] = {}
    arena = pvmm.GrowableArena(reserve_size=GIB, chunk_size=32 * MIB)
    for name, source in (("pool", pvmm.MemoryPool.create()), ("arena", arena)):
        source.install_c_allocator()
        t = now()
        for _ in range(n):
            p = alloc(2 * MIB, 0, stream.handle)
            free(p, 2 * MIB, 0, stream.handle)
        stream.synchronize()
        res[f"{name} alloc+free us"] = round((now() - t) / n * 1e6, 2)
    res["arena grows (map/unmap per pair)"] = arena.statistics()["grows"]
    arena.close()
    return res


# ---- sleep / wake ------------------------------------------------------------------------------------------------


def sleep_wake_pvmm(total: int) -> dict[str, Any]:
    s = pvmm.SleepingAllocator()
    addrs = [s.allocate(SLEEP_CHUNK, "w") for _ in range(max(1, total // SLEEP_CHUNK))]
    before = free_gpu_memory()
    t = now()
    s.sleep(["w"], offload=True)
    slept = now() - t
    during = free_gpu_memory()
    t = now()
    s.wake(["w"])
    woke = now() - t
    res: dict[str, Any] = {"sleep ms": round(slept * 1e3, 1), "wake ms": round(woke * 1e3, 1)}
    if before is not None and during is not None:
        res["GiB freed while asleep"] = round((during - before) / GIB, 2)
    for a in addrs:
        s.free(a)
    s.close()
    return res


def sleep_wake_raw(total: int) -> dict[str, Any]:
    """The same by hand on the driver calls (cuda-python): what vLLM's CuMemAllocator does."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        from cuda import cuda as cu  # cuda-python before 12.6

    def ok(ret: Any) -> Any:
        """cuda-python returns (error, values...): the value (or the tuple of them), raising on an error."""
        ret = ret if isinstance(ret, tuple) else (ret,)
        if ret[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"driver call failed: {ret[0]}")
        return ret[1] if len(ret) == 2 else ret[1:]

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = 0
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    n = max(1, total // SLEEP_CHUNK)

    def create_map(ptr: Any) -> Any:
        handle = ok(cu.cuMemCreate(SLEEP_CHUNK, prop, 0))
        ok(cu.cuMemMap(ptr, SLEEP_CHUNK, 0, handle, 0))
        ok(cu.cuMemSetAccess(ptr, SLEEP_CHUNK, [access], 1))
        return handle

    ptrs = [ok(cu.cuMemAddressReserve(SLEEP_CHUNK, 0, 0, 0)) for _ in range(n)]
    handles = [create_map(p) for p in ptrs]
    before = ok(cu.cuMemGetInfo())[0]
    t = now()
    hosts = []
    for p, h in zip(ptrs, handles):
        host = ok(cu.cuMemAllocHost(SLEEP_CHUNK))
        ok(cu.cuMemcpyDtoH(host, p, SLEEP_CHUNK))
        ok(cu.cuMemUnmap(p, SLEEP_CHUNK))
        ok(cu.cuMemRelease(h))
        hosts.append(host)
    slept = now() - t
    during = ok(cu.cuMemGetInfo())[0]
    t = now()
    handles = []
    for p, host in zip(ptrs, hosts):
        handles.append(create_map(p))
        ok(cu.cuMemcpyHtoD(p, host, SLEEP_CHUNK))
        ok(cu.cuMemFreeHost(host))
    woke = now() - t
    for p, h in zip(ptrs, handles):
        ok(cu.cuMemUnmap(p, SLEEP_CHUNK))
        ok(cu.cuMemRelease(h))
        ok(cu.cuMemAddressFree(p, SLEEP_CHUNK))
    return {
        "sleep ms": round(slept * 1e3, 1),
        "wake ms": round(woke * 1e3, 1),
        "GiB freed while asleep": round((during - before) / GIB, 2),
    }


# ---- pinned staging buffers -------------------------------------------------------------------------------------

STAGING_SIZES = (64 << 10, MIB)


def staging_pvmm(n: int) -> dict[str, Any]:
    s = pvmm.Stream.create()
    pool = pvmm.PinnedPool.create()
    res: dict[str, Any] = {"source": pool.source}
    for size in STAGING_SIZES:
        target = pvmm.MemoryPool.create().allocate(size, s)
        s.synchronize()
        t = now()
        for _ in range(n):
            p = pool.allocate(size)
            s.copy(target.address, p, size)
            pool.deallocate(p, s)
        s.synchronize()
        res[f"{size >> 10} KiB us"] = round((now() - t) / n * 1e6, 2)
        target.close()
    res["blocks made"] = pool.stats()["new_blocks"]
    pool.close()
    return res


def staging_torch(n: int) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"skipped": "[pvmm-skip] torch is not installed"}
    if not torch.cuda.is_available():
        return {"skipped": "[pvmm-skip] torch sees no GPU"}
    res: dict[str, Any] = {}
    for size in STAGING_SIZES:
        d = torch.empty(size, dtype=torch.uint8, device="cuda")
        for how in ("copy_", ".to"):
            torch.cuda.synchronize()
            t = now()
            for _ in range(n):
                x = torch.empty(size, dtype=torch.uint8, pin_memory=True)
                if how == "copy_":
                    d.copy_(x, non_blocking=True)
                else:
                    y = x.to("cuda", non_blocking=True)
                    del y
                del x  # back to the cache; reused once the copy's event has completed
            torch.cuda.synchronize()
            res[f"{size >> 10} KiB {how} us"] = round((now() - t) / n * 1e6, 2)
    return res


# ---- Python cost per call ----------------------------------------------------------------------------------------


def per_call(n: int) -> dict[str, Any]:
    def us(fn: Callable[[], object]) -> float:
        t = now()
        for _ in range(n):
            fn()
        return round((now() - t) / n * 1e6, 3)

    s = pvmm.Stream.create()
    pool = pvmm.MemoryPool.create()
    arena = pvmm.GrowableArena(reserve_size=64 * MIB, chunk_size=2 * MIB)
    keep = arena.allocate(4096)  # the mapping stays: the pairs below map nothing
    p = pool.allocate_async(4096, s)
    items = [1, 2, 3]
    res: dict[str, Any] = {
        "Python no-op call (len)": us(lambda: len(items)),
        "query_pointer": us(lambda: pvmm.query_pointer(p)),
        "pool allocate_async+free_async": us(lambda: pool.free_async(pool.allocate_async(4096, s), s)),
        "arena allocate+free": us(lambda: arena.free(arena.allocate(4096))),
        "stream.synchronize (idle)": us(s.synchronize),
    }
    pool.free_async(p, s)
    s.synchronize()
    arena.free(keep)
    return {k + " us": v for k, v in res.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=None, help="growth and sleep/wake size (default 8; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="1 GiB (0.25 on host) and fewer repetitions")
    args = ap.parse_args()
    gib = args.gib if args.gib is not None else (1.0 if args.quick else 8.0) if GPU else 0.25
    free = free_gpu_memory()
    rows: list[tuple[str, Any]] = [("device", f"{pvmm.backend()['name']}: {pvmm.device(0)['name']}")]
    if free is not None:
        # torch's cudaMalloc + copy holds old and new at once: keep 2x the size (and a margin) within what is free.
        fits = max(STEP, int(free * 0.45) // STEP * STEP)
        if gib * GIB > fits:
            rows.append(("size", f"{gib} GiB asked, {fits / GIB:.2f} GiB used: {free / GIB:.1f} GiB free on the GPU"))
            gib = fits / GIB
    total = max(STEP, int(gib * GIB) // STEP * STEP)
    label = f"{total / GIB:g} GiB"
    reps = 2000 if args.quick else 10000
    rows.append((f"growth to {label}, pvmm GrowableBuffer", attempt(lambda: growth_pvmm(total))))
    if GPU:
        rows.append((f"growth to {label}, torch expandable segments", attempt(lambda: growth_torch(total, True))))
        rows.append((f"growth to {label}, torch cudaMalloc + copy", attempt(lambda: growth_torch(total, False))))
        rows.append((f"growth to {label}, cuda.core VirtualMemoryResource", attempt(lambda: growth_cuda_core(total))))
        rows.append(("alloc/free 1 MiB tensor, torch", attempt(lambda: alloc_free_torch(reps))))
        rows.append(("plug-in C entry points alone, 2 MiB", attempt(lambda: entry_points_alone(reps // 10))))
    rows.append((f"sleep/wake {label} (offload), pvmm SleepingAllocator", attempt(lambda: sleep_wake_pvmm(total))))
    if GPU:
        rows.append((f"sleep/wake {label} (offload), raw driver calls", attempt(lambda: sleep_wake_raw(total))))
    rows.append(("pinned staging buffer reused, pvmm PinnedPool", attempt(lambda: staging_pvmm(reps // 2))))
    if GPU:
        torch_row = "pinned staging buffer reused, torch CachingHostAllocator"
        rows.append((torch_row, attempt(lambda: staging_torch(reps // 2))))
    rows.append(("pvmm Python cost per call", attempt(lambda: per_call(reps * 2))))
    print("| measurement | result |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v if isinstance(v, str) else json.dumps(v)} |")


if __name__ == "__main__":
    main()
