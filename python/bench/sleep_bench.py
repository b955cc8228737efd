"""Sleep/wake through PyTorch (issue 49 item 7): pvmm's SleepingAllocator behind torch.cuda.MemPool against SGLang's
torch_memory_saver (0.0.10: `pip download torch-memory-saver==0.0.10`, carried to the GPU machine) and against the
bus (the same bytes through one pinned buffer). Each side runs in a fresh process: N tensors of B MiB are allocated
through that side's plug-in, filled with a pattern, then slept and woken C times; time and GiB/s of the first cycle
and the median of the rest, device memory given back while asleep (cudaMemGetInfo), every byte checked after each
wake. Prints a Markdown table.

    python python/bench/sleep_bench.py                      # 64 x 128 MiB, 5 cycles
    python python/bench/sleep_bench.py --count 4096 --mib 2 # 4096 x 2 MiB
    python python/bench/sleep_bench.py --sides pvmm,pvmm-pageable,pvmm-kept,tms,bus --cycles 3
Sides: pvmm (policy pinned), pvmm-kept (pinned, keep_host_memory), pvmm-pageable (through the staging ring),
tms (torch_memory_saver, pinned CPU backup), bus (one pinned buffer, D2H then H2D)."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time

GIB = 1 << 30


def side_main(side: str, count: int, mib: int, cycles: int) -> dict:
    import torch

    torch.cuda.init()
    dev = torch.device("cuda", 0)
    numel = mib * (1 << 20) // 8
    free0, _ = torch.cuda.mem_get_info()

    def pattern(i: int, rnd: int) -> torch.Tensor:
        return torch.arange(numel, dtype=torch.int64, device=dev) * 2654435761 + (i << 20) + rnd

    tensors: list[torch.Tensor] = []
    pin_s = None  # the bus side: how long page-locking the host buffer took (a first sleep's floor)
    if side.startswith("pvmm"):
        import pvmm
        from pvmm import allocators

        sleeper = pvmm.SleepingAllocator(keep_host_memory=side == "pvmm-kept")
        sleeper.set_policy("bench", "pageable" if side == "pvmm-pageable" else "pinned")
        pool = allocators.torch_mem_pool(sleeper)
        with torch.cuda.use_mem_pool(pool), allocators.tag(sleeper, "bench"):
            tensors = [torch.empty(numel, dtype=torch.int64, device=dev) for _ in range(count)]

        def sleep() -> None:
            sleeper.sleep(["bench"])

        def wake() -> None:
            sleeper.wake(["bench"])
    elif side == "tms":
        import torch_memory_saver

        # Its default hook mode, as SGLang runs it: the parent started this process with LD_PRELOAD set by
        # configure_subprocess(). (hook_mode="torch" frees through its MemPool outside region() and fails: "only
        # support interesting region".)
        saver = torch_memory_saver.torch_memory_saver
        with saver.region(tag="bench", enable_cpu_backup=True):
            tensors = [torch.empty(numel, dtype=torch.int64, device=dev) for _ in range(count)]

        def sleep() -> None:
            saver.pause("bench")

        def wake() -> None:
            saver.resume("bench")
    else:  # the bus: one pinned buffer holding every tensor's bytes
        tensors = [torch.empty(numel, dtype=torch.int64, device=dev) for _ in range(count)]
        t0 = time.perf_counter()
        host = torch.empty(count * numel, dtype=torch.int64, pin_memory=True)
        pin_s = time.perf_counter() - t0

        def sleep() -> None:
            for i, t in enumerate(tensors):
                host[i * numel:(i + 1) * numel].copy_(t, non_blocking=True)
            torch.cuda.synchronize()

        def wake() -> None:
            for i, t in enumerate(tensors):
                t.copy_(host[i * numel:(i + 1) * numel], non_blocking=True)
            torch.cuda.synchronize()

    sleeps, wakes, given_back, checked = [], [], None, True
    for rnd in range(cycles):
        for i, t in enumerate(tensors):
            t.copy_(pattern(i, rnd))
        torch.cuda.synchronize()
        awake_free, _ = torch.cuda.mem_get_info()
        t0 = time.perf_counter()
        sleep()
        torch.cuda.synchronize()
        sleeps.append(time.perf_counter() - t0)
        if rnd == 0:
            asleep_free, _ = torch.cuda.mem_get_info()
            given_back = (asleep_free - awake_free) / GIB
        t0 = time.perf_counter()
        wake()
        torch.cuda.synchronize()
        wakes.append(time.perf_counter() - t0)
        for i, t in enumerate(tensors):
            checked = checked and bool(torch.equal(t, pattern(i, rnd)))
    total = count * mib * (1 << 20)

    def summary(ts: list[float]) -> dict:
        steady = statistics.median(ts[1:]) if len(ts) > 1 else ts[0]
        return {"first_s": ts[0], "steady_s": steady, "first_gibs": total / GIB / ts[0],
                "steady_gibs": total / GIB / steady}

    return {"side": side, "sleep": summary(sleeps), "wake": summary(wakes), "given_back_gib": given_back,
            "gib": total / GIB, "checked": checked, "free_before_gib": free0 / GIB, "pin_s": pin_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--sides", default="bus,pvmm,pvmm-kept,pvmm-pageable,tms")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # the child
    a = ap.parse_args()
    if a.side:
        print(json.dumps(side_main(a.side, a.count, a.mib, a.cycles)))
        return 0
    print(f"| side | sleep first s (GiB/s) | sleep steady s (GiB/s) | wake first s (GiB/s) | wake steady s (GiB/s) "
          f"| GiB given back | bytes checked |  ({a.count} x {a.mib} MiB, {a.cycles} cycles)")
    print("|---|---|---|---|---|---|---|")
    for side in a.sides.split(","):
        preload: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        if side == "tms":
            try:
                from torch_memory_saver import configure_subprocess

                preload = configure_subprocess()  # LD_PRELOAD of its hook library, for the child only
            except ImportError as e:
                print(f"| {side} | [pvmm-skip] {e} | | | | | |")
                continue
        with preload:
            r = subprocess.run([sys.executable, __file__, "--side", side, "--count", str(a.count), "--mib",
                                str(a.mib), "--cycles", str(a.cycles)], capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            print(f"| {side} | [pvmm-skip] {last[:150]} | | | | | |")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])

        def cell(x: dict, k: str) -> str:
            return f"{x[k + '_s']:.3f} ({x[k + '_gibs']:.1f})"

        gb = "-" if d["given_back_gib"] is None or side == "bus" else f"{d['given_back_gib']:.2f} of {d['gib']:.2f}"
        print(f"| {side} | {cell(d['sleep'], 'first')} | {cell(d['sleep'], 'steady')} | {cell(d['wake'], 'first')} "
              f"| {cell(d['wake'], 'steady')} | {gb} | {'yes' if d['checked'] else 'MISMATCH'} |")
        if d.get("pin_s") is not None:  # what a first sleep into fresh page-locked memory cannot go below
            pinned = d["gib"] / d["pin_s"]
            print(f"| page-locking {d['gib']:.2f} GiB of fresh host memory alone (torch pin_memory) | {d['pin_s']:.3f} "
                  f"({pinned:.1f}) | | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
