#!/usr/bin/env bash
# Builds the CUDA backend on a GPU machine and runs pvmm-info --check and the conformance suite.
# The GPU machines have no package manager: fmt and doctest come unpacked in .deps/root (tools/fetch-deps.sh).
# Usage: tools/gpu-verify.sh [build-dir]     (writes logs to $OUT when set)
set -uo pipefail
build=${1:-build/gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$build" -G Ninja -DPVMM_BACKEND=cuda -DPVMM_WARNINGS_AS_ERRORS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
nvidia-smi -L
"$build/tools/pvmm-info" --check | tee "$out/pvmm-info.log"
info_rc=${PIPESTATUS[0]}
ctest --test-dir "$build" -j1 --output-on-failure >"$out/ctest.log" 2>&1
ctest_rc=$?
grep -E "tests passed|Skipped|Failed|\*\*\*" "$out/ctest.log" | tail -40
"$build/tests/pvmm_conformance" >"$out/conformance.log" 2>&1
suite_rc=$?
tail -4 "$out/conformance.log"
echo "pvmm-info rc=$info_rc ctest rc=$ctest_rc suite rc=$suite_rc"
if [ "$(nvidia-smi -L | wc -l)" -gt 1 ]; then
  echo "--- the same suite restricted to one GPU (CUDA_VISIBLE_DEVICES=0) ---"
  CUDA_VISIBLE_DEVICES=0 "$build/tests/pvmm_conformance" >"$out/conformance-1gpu.log" 2>&1
  echo "single-GPU suite rc=$?"; tail -3 "$out/conformance-1gpu.log"
fi
echo "--- examples ---"
for example in vector_add grow multi_gpu_stripes; do "$build/examples/pvmm_example_$example"; echo "$example rc=$?"; done
"$build/examples/pvmm_example_ipc_ring" 4; echo "ipc_ring rc=$?"
"$build/examples/pvmm_example_ipc_ring_gpu" 4; echo "ipc_ring_gpu rc=$?"
"$build/examples/pvmm_example_multicast_allreduce"; echo "multicast_allreduce rc=$? (must refuse: PVMM_ENABLE_MULTICAST_TESTS unset)"
