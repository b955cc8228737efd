#!/usr/bin/env python3
"""PyTorch SymmetricMemory's side of `pvmm-bench teams --compare torch` (tools/bench/team_torch.hpp).

For each team size N it starts N processes (this script again, --rank), one GPU each (torch.cuda.set_device(rank)),
joined by torch.distributed.init_process_group("nccl") over a FileStore, and times:
  create     symm_mem.empty(slot bytes) + symm_mem.rendezvous(tensor, group): the analogue of pvmm's
             symmetric_window::create (one uncounted repetition first: torch's first rendezvous in a process sets up
             its exchange, which pvmm's team::create does in its own column);
  allreduce  torch.ops.symm_mem.one_shot_all_reduce(_out) of float sums over one symmetric buffer, per size `ops`
             back to back and then torch.cuda.synchronize(), rounds after one uncounted warm-up round, every rank
             lined up at dist.barrier() before each block; then once more into a NaN-filled output, every float
             checked against the exact sum (inputs are small integers: (rank + 1) * (i % 97)).
Never a multicast object: TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NCCL_NVLS_ENABLE=0 (NCCL_COLLNET_ENABLE=0) are set
before torch loads; TORCH_SYMMMEM_IMPLICIT_POOL=0, so every symm_mem.empty allocates (the pool would hand a freed
buffer back and rendezvous would return its cached handle).

Output, one line each (a rank's lines are single writes, so ranks never interleave within a line):
  [pvmm-skip] <reason>              nothing can run here (no torch, no CUDA, no symm_mem)
  skip <N> <reason>                 team size N cannot run (too few GPUs, the API refused)
  version <torch version>
  create <N> <bytes> <rank> <rep> <seconds>
  allreduce <N> <bytes> <rank> <round> <seconds per all-reduce>
  fail <what>                       a wrong sum or a rank past its deadline: the exit status is 1
Usage: torch_symm_mem.py [--ranks 2,4,8] [--create BYTES:REPS,...] [--allreduce BYTES:OPS,...] [--rounds R]
                         [--deadline SECONDS]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

# Before torch loads (its symmetric memory and NCCL read them once).
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["NCCL_COLLNET_ENABLE"] = "0"
os.environ["TORCH_SYMMMEM_IMPLICIT_POOL"] = "0"

MIB = 1 << 20


def emit(line):
    os.write(1, (line + "\n").encode())


def plan(text):
    """'4096:10,65536:10' -> [(4096, 10), (65536, 10)]"""
    out = []
    for item in filter(None, (text or "").split(",")):
        size, count = item.split(":")
        out.append((int(size), int(count)))
    return out


def arguments(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="2,4,8", help="team sizes, comma-separated")
    p.add_argument("--create", default=f"{2 * MIB}:7,{64 * MIB}:7,{1024 * MIB}:3", help="slot bytes:repetitions")
    p.add_argument("--allreduce", default=f"4096:10,65536:10,{MIB}:10,{16 * MIB}:5,{64 * MIB}:5",
                   help="bytes:all-reduces per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--deadline", type=float, default=280, help="seconds for the whole script")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # a rank process (started by this script)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def what_is_missing():
    """Why nothing can run here, or None."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure is a reason to skip
        return f"torch not importable ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    try:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"torch {torch.__version__} has no torch.distributed._symmetric_memory ({e})"
    if not dist.is_nccl_available():
        return f"torch {torch.__version__} was built without NCCL (its process group)"
    try:
        torch.ops.symm_mem.one_shot_all_reduce  # noqa: B018 - resolves the op or raises
    except Exception as e:  # noqa: BLE001
        return f"torch {torch.__version__} has no torch.ops.symm_mem.one_shot_all_reduce ({e})"
    return None


# ---- a rank ----

class Rank:
    def __init__(self, a):
        import datetime

        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self.torch, self.dist, self.symm_mem = torch, dist, symm_mem
        self.rank, self.size = a.rank, a.size
        torch.cuda.set_device(a.rank)
        self.device = torch.device("cuda", a.rank)
        dist.init_process_group("nccl", init_method=f"file://{a.store}", rank=a.rank, world_size=a.size,
                                timeout=datetime.timedelta(seconds=60))
        self.group_name = dist.group.WORLD.group_name
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)  # needed up to torch 2.7, deprecated after
        if enable is not None:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(self.group_name)

    def barrier(self):
        try:
            self.dist.barrier(device_ids=[self.rank])
        except TypeError:
            self.dist.barrier()

    def empty(self, count, dtype):
        return self.symm_mem.empty(count, dtype=dtype, device=self.device)

    def rendezvous(self, tensor):
        handle = self.symm_mem.rendezvous(tensor, self.group_name)
        if getattr(handle, "multicast_ptr", 0):  # the environment above should have prevented it: say so loudly
            emit(f"fail N={self.size} rank {self.rank}: rendezvous made a multicast object despite "
                 "TORCH_SYMM_MEM_DISABLE_MULTICAST=1")
            sys.exit(1)
        return handle

    def create(self, n, slot, reps):
        torch = self.torch
        for rep in range(-1, reps):  # -1: uncounted (the process's first rendezvous sets up its exchange)
            self.barrier()
            t0 = time.perf_counter()
            t = self.empty(slot, torch.uint8)
            handle = self.rendezvous(t)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            if rep >= 0:
                emit(f"create {n} {slot} {self.rank} {rep} {seconds!r}")
            self.barrier()  # every peer mapped it; now every rank lets go
            del handle, t
            torch.cuda.synchronize()

    def allreduce(self, n, sizes, rounds):
        torch = self.torch
        max_count = max(b for b, _ in sizes) // 4
        buf = self.empty(max_count, torch.float32)
        self.rendezvous(buf)
        pattern = torch.arange(max_count, device=self.device, dtype=torch.int64) % 97
        buf.copy_(pattern.to(torch.float32) * (self.rank + 1))
        out = torch.empty(max_count, device=self.device, dtype=torch.float32)
        ops = torch.ops.symm_mem
        has_out = hasattr(ops, "one_shot_all_reduce_out")

        def reduce(count):
            if has_out:
                ops.one_shot_all_reduce_out(buf.narrow(0, 0, count), "sum", self.group_name, out.narrow(0, 0, count))
            else:
                out.narrow(0, 0, count).copy_(ops.one_shot_all_reduce(buf.narrow(0, 0, count), "sum",
                                                                      self.group_name))

        torch.cuda.synchronize()
        for bytes_, k in sizes:
            count = bytes_ // 4
            for rnd in range(-1, rounds):  # -1 warms up, uncounted
                self.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(k):
                    reduce(count)
                torch.cuda.synchronize()
                seconds = (time.perf_counter() - t0) / k
                if rnd >= 0:
                    emit(f"allreduce {n} {bytes_} {self.rank} {rnd} {seconds!r}")
            out.narrow(0, 0, count).fill_(float("nan"))
            self.barrier()
            reduce(count)
            torch.cuda.synchronize()
            expected = pattern.narrow(0, 0, count).to(torch.float32) * (n * (n + 1) // 2)
            got = out.narrow(0, 0, count)
            if not torch.equal(got, expected):
                bad = int((got != expected).nonzero()[0].item())
                emit(f"fail N={n} rank {self.rank}, {count} floats: float {bad} is {got[bad].item()}, "
                     f"expected {expected[bad].item()}")
                return False
        self.barrier()  # no rank frees its buffer while a peer still reads
        return True

    def close(self):
        self.dist.destroy_process_group()


def rank_main(a):
    try:
        r = Rank(a)
        for slot, reps in plan(a.create):
            r.create(a.size, slot, reps)
        sizes = plan(a.allreduce)
        ok = r.allreduce(a.size, sizes, a.rounds) if sizes else True
        r.close()
    except Exception as e:  # noqa: BLE001 - an API that refuses is a skip reason, said by the parent
        emit(f"refused {a.size} {a.rank} {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        return 3
    return 0 if ok else 1


# ---- the parent: one team size at a time ----

def run_team(a, n, until):
    """Runs N ranks; False where one failed a check or ran past `until`."""
    with tempfile.TemporaryDirectory(prefix="pvmm-torch-symm-mem-") as tmp:
        argv = [sys.executable, os.path.abspath(__file__), "--rank", "0", "--size", str(n),
                "--store", os.path.join(tmp, "store"), "--create", a.create, "--allreduce", a.allreduce,
                "--rounds", str(a.rounds)]
        children = []
        for r in range(n):
            argv[3] = str(r)
            children.append(subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True))
        # A rank that refused (exit 3) or failed leaves its peers waiting in a collective: stop them rather than
        # let the deadline do it, so the reason is the rank's, not a timeout.
        in_time = True
        while None in [c.poll() for c in children]:  # a list: every child polled (any() would stop at the first)
            if time.monotonic() > until:
                in_time = False
            if not in_time or any(c.returncode not in (None, 0) for c in children):
                for c in children:
                    if c.poll() is None:
                        c.kill()  # our own children
                break
            time.sleep(0.05)
        outputs = [c.communicate()[0] for c in children]
    lines = [line for out in outputs for line in out.splitlines() if line]
    refused = next((line.split(" ", 3)[3] for line in lines if line.startswith("refused ")), None)
    failed = any(line.startswith("fail ") for line in lines)
    for line in lines:
        if not line.startswith("refused "):
            print(line, flush=True)
    ok = in_time and not failed and (refused is not None or all(c.returncode == 0 for c in children))
    if not in_time:
        print(f"fail N={n}: not done within the deadline (ranks killed)", flush=True)
    elif refused is not None and not failed:
        print(f"skip {n} PyTorch SymmetricMemory refused: {refused}", flush=True)
    elif not ok and not failed:
        print(f"fail N={n}: a rank exited with {[c.returncode for c in children]}", flush=True)
    return ok


def main(argv):
    a = arguments(argv)
    if a.rank is not None:
        return rank_main(a)
    until = time.monotonic() + a.deadline
    missing = what_is_missing()
    if missing:
        print(f"[pvmm-skip] {missing}", flush=True)
        return 0
    import torch

    nccl = torch.cuda.nccl.version()  # a tuple, or an int in older releases
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    print(f"version {torch.__version__} (NCCL {nccl})", flush=True)
    gpus = torch.cuda.device_count()
    ok = True
    for n in (int(x) for x in a.ranks.split(",") if x):
        if gpus < n:
            print(f"skip {n} needs one GPU per rank ({n} ranks, {gpus} GPUs here)", flush=True)
            continue
        if any(not torch.cuda.can_device_access_peer(i, j) for i in range(n) for j in range(n) if i != j):
            print(f"skip {n} GPUs 0-{n - 1} cannot all access each other", flush=True)
            continue
        ok = run_team(a, n, until) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
