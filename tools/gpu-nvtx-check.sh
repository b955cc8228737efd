#!/usr/bin/env bash
# On a GPU machine: the planted one-byte overrun (tests/cuda/nvtx_overrun.cpp) under compute-sanitizer's memcheck.
# With NVTX registration on, memcheck must report the write one byte past the 1000-byte caching-allocator block
# (exit 9 and "Invalid __global__ write of size 1"); with it off, the byte lands inside the block's 512-byte
# rounding and nothing may be reported (exit 0).
# Usage: tools/gpu-nvtx-check.sh [build/cuda/tests/pvmm_cuda_nvtx_overrun]   (build it with the cuda preset)
set -uo pipefail
bin=${1:-build/cuda/tests/pvmm_cuda_nvtx_overrun}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
on=$("$sanitizer" --tool memcheck --error-exitcode 9 "$bin" on 2>&1); on_rc=$?
off=$("$sanitizer" --tool memcheck --error-exitcode 9 "$bin" off 2>&1); off_rc=$?
big=$("$sanitizer" --tool memcheck --error-exitcode 9 "$bin" on big 2>&1); big_rc=$?
echo "--- registration on (rc $on_rc) ---"; echo "$on" | tail -n 25
echo "--- registration off (rc $off_rc) ---"; echo "$off" | tail -n 8
echo "--- registration on, a block over two chunks (rc $big_rc) ---"; echo "$big" | tail -n 12
if [ $on_rc -ne 9 ] || ! grep -q "Invalid __global__ write of size 1" <<<"$on"; then
  echo "nvtx check: FAILED: memcheck did not report the overrun with registration on"; status=1
fi
if [ $big_rc -ne 9 ] || ! grep -q "Invalid __global__ write of size 1" <<<"$big"; then
  echo "nvtx check: FAILED: memcheck did not report the overrun of a block over two chunks"; status=1
fi
if [ $off_rc -ne 0 ]; then echo "nvtx check: FAILED: memcheck reported something with registration off"; status=1; fi
[ $status -eq 0 ] && echo "nvtx check: memcheck flags the overrun with NVTX registration on, nothing with it off"
exit $status
