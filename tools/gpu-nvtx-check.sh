#!/usr/bin/env bash
# On a GPU machine: the planted one-byte overrun (tests/cuda/nvtx_overrun.cpp) under compute-sanitizer's memcheck.
# With NVTX registration on, memcheck must report the write one byte past the 1000-byte caching-allocator block
# (exit 9 and "Invalid __global__ write of size 1"), also for a block over two chunks, and refuse no NVTX call
# ("nvtxMemHeapRegister failed"); with it off, the byte lands inside the block's 512-byte rounding and nothing may be
# reported (exit 0). The raw modes plant the same overrun with pvmm out of the way, and say which memory
# compute-sanitizer takes as a heap: a cuMemAlloc allocation (NVIDIA's sample: must be flagged, else the tool itself
# is not checking), one cuMemMap mapping (pvmm's layout), two mappings in one reservation (pvmm's first layout).
# Usage: tools/gpu-nvtx-check.sh [build/cuda/tests/pvmm_cuda_nvtx_overrun]   (build it with the cuda preset)
set -uo pipefail
bin=${1:-build/cuda/tests/pvmm_cuda_nvtx_overrun}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
declare -A out rc
for mode in "on" "off" "on big" raw-malloc raw-vmm raw-vmm2; do
  # shellcheck disable=SC2086  # "on big" is two arguments
  out[$mode]=$("$sanitizer" --tool memcheck --error-exitcode 9 "$bin" $mode 2>&1)
  rc[$mode]=$?
  flagged=no refused=no
  grep -q "Invalid __global__ write of size 1" <<<"${out[$mode]}" && flagged=yes
  grep -q "nvtxMemHeapRegister failed\|nvtxMemRegionsRegister failed" <<<"${out[$mode]}" && refused=yes
  echo "--- $mode: rc ${rc[$mode]}, overrun flagged: $flagged, an NVTX call refused: $refused ---"
  echo "${out[$mode]}" | tail -n 14
done
for mode in "on" "on big"; do
  if [ "${rc[$mode]}" -ne 9 ] || ! grep -q "Invalid __global__ write of size 1" <<<"${out[$mode]}"; then
    echo "nvtx check: FAILED: memcheck did not report the overrun ($mode)"; status=1
  fi
  if grep -q "nvtxMemHeapRegister failed\|nvtxMemRegionsRegister failed" <<<"${out[$mode]}"; then
    echo "nvtx check: FAILED: compute-sanitizer refused an NVTX call of pvmm's ($mode)"; status=1
  fi
done
if [ "${rc[off]}" -ne 0 ]; then echo "nvtx check: FAILED: memcheck reported something with registration off"; status=1; fi
if [ "${rc[raw-malloc]}" -ne 9 ]; then
  echo "nvtx check: FAILED: not even a heap over cuMemAlloc memory was checked (the tool's NVTX support is off?)"
  status=1
fi
[ $status -eq 0 ] && echo "nvtx check: memcheck flags the overrun with NVTX registration on, nothing with it off"
exit $status
