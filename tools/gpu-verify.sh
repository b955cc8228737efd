#!/usr/bin/env bash
# Builds pvmm on a GPU machine and runs pvmm-info --check, CTest, the conformance suite (also restricted to one
# GPU when there are several) and the examples, for each backend that runs on NVIDIA GPUs:
#   cuda          the CUDA driver backend
#   hip-nvidia    the hip backend on HIP's NVIDIA platform (HIP's CUDA mapping), when .deps/hip-nvidia has the headers
#   host          the host backend (not a GPU run: CI's suite, built where there are cores to spare)
#   python        the Python package built for cuda with the machine's Python (torch, cupy, nanobind and
#                 scikit-build-core there; nothing downloaded) and python/tests, test_gpu.py included
#   python-hip-nvidia  the same for the hip backend on HIP's NVIDIA platform (HIP's headers in .deps/hip-nvidia)
# The GPU machines have no package manager: fmt and doctest come unpacked in .deps/root, and the HIP headers in
# .deps/hip-nvidia (tools/fetch-deps.sh; carry ".deps").
# Usage: [PVMM_VERIFY="cuda hip-nvidia"] [PVMM_CTEST_JOBS=1] [PVMM_CTEST_ARGS="-R team"] [PVMM_CMAKE_ARGS="-D..."]
#        tools/gpu-verify.sh [build-root]
#   PVMM_CTEST_ARGS goes to CTest: a subset where the whole suite does not fit one device call (hip-nvidia on four
#   GPUs sets HIP up in about 6 s per test process: 534 tests at -j8 take > 10 min).
#   PVMM_VERIFY_SECONDS (e.g. 560, under the call's limit): CTest starts no test after that point less a reserve for
#   the one-at-a-time rerun (--stop-time), so it ends by itself, writes which tests failed and the rerun reads them
#   by name (a CTest killed at the call's limit leaves no failed list, and tools/ctest-rerun-failed.sh says so).
#   Logs go to $OUT/gpu-verify-logs.tar.gz (one file: the device tool brings back only a few files a call), packed
#   after each backend; the summary lines go to standard output.
# PVMM_SUITE_SECONDS (400): the limit of the conformance suite's one process (run first, alone); 0 skips it (a
#   CTest subset run).
# On 2 GPUs, PVMM_CTEST_JOBS above 12 starves the team cases (four processes each, contexts on both GPUs): ranks
# miss their 20 s deadlines, and cases that read the device's free memory fail beside the others (rerun alone).
set -uo pipefail
root=${1:-build/gpu}
started=$(date +%s)
out=$(mktemp -d)/gpu-verify-logs
mkdir -p "$out"
pack() { [ -n "${OUT:-}" ] && tar -C "$(dirname "$out")" -czf "$OUT/gpu-verify-logs.tar.gz" gpu-verify-logs; }
stop_time_args() {  # --stop-time for CTest: PVMM_VERIFY_SECONDS after the start, less $1 s kept for what follows
  [ -n "${PVMM_VERIFY_SECONDS:-}" ] || return 0
  echo --stop-time "$(date -d "@$((started + PVMM_VERIFY_SECONDS - $1))" +%H:%M:%S)"
}
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi -L
gpus=$(nvidia-smi -L | wc -l)
overall=0

verify() {  # verify <name> <cmake args...>
  local name=$1 build=$root/$1 log=$out/$1
  shift
  mkdir -p "$log"
  echo "=== $name ==="
  # shellcheck disable=SC2086  # PVMM_CMAKE_ARGS is a list of arguments (the bench's torch and RMM roots)
  cmake -S . -B "$build" -G Ninja -DPVMM_WARNINGS_AS_ERRORS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" -DPython3_EXECUTABLE="$(command -v python3)" "$@" ${PVMM_CMAKE_ARGS:-} >"$log/configure.log" 2>&1 || { tail -30 "$log/configure.log"; overall=1; return; }
  cmake --build "$build" -j"$(nproc)" >"$log/build.log" 2>&1 || { grep -E "error" "$log/build.log" | head -30; overall=1; return; }
  "$build/tools/pvmm-info" --check | tee "$log/pvmm-info.log"
  local info_rc=${PIPESTATUS[0]}
  # The conformance suite first, in one process with the GPU to itself: its cases check the device's free memory
  # before and after, which other test processes beside them would change. CTest then runs everything else (team,
  # C, backend, example and tool tests) in parallel, without the suite's cases again unless PVMM_CTEST_ARGS says so.
  local suite_rc=0
  if [ "${PVMM_SUITE_SECONDS:-400}" -gt 0 ]; then
    timeout "${PVMM_SUITE_SECONDS:-400}" "$build/tests/pvmm_conformance" >"$log/conformance.log" 2>&1
    suite_rc=$?
    tail -4 "$log/conformance.log"
    grep -h "\[pvmm-skip\]" "$log/conformance.log" | sort | uniq -c
  fi
  local ctest_args=${PVMM_CTEST_ARGS:--E ^conformance/}
  # shellcheck disable=SC2086  # ctest_args is a list of arguments
  # shellcheck disable=SC2046  # stop_time_args gives two words or none
  ctest --test-dir "$build" -j"${PVMM_CTEST_JOBS:-1}" --output-on-failure $(stop_time_args 150) $ctest_args \
    >"$log/ctest.log" 2>&1
  local ctest_rc=$?
  grep -E "tests passed|Skipped|Failed|\*\*\*" "$log/ctest.log" | tail -40
  if [ $ctest_rc -ne 0 ] && [ "${PVMM_CTEST_JOBS:-1}" -gt 1 ]; then
    # Cases that check the process's fds or the device's free memory (the team cycles) read what the other test
    # processes beside them change, and loaded ranks can miss a deadline: the failed ones run again, one at a time.
    echo "--- $name: the failed tests again, one at a time, by name (tools/ctest-rerun-failed.sh) ---"
    # shellcheck disable=SC2046
    bash tools/ctest-rerun-failed.sh "$build" --output-on-failure $(stop_time_args 60) >"$log/ctest-rerun.log" 2>&1
    ctest_rc=$?
    grep -E "tests passed|Failed|ctest-rerun-failed" "$log/ctest-rerun.log" | tail -10
  fi
  echo "$name: pvmm-info rc=$info_rc ctest rc=$ctest_rc suite rc=$suite_rc"
  [ $info_rc -eq 0 ] && [ $ctest_rc -eq 0 ] && [ $suite_rc -eq 0 ] || overall=1
  if [ "$gpus" -gt 1 ] && [ "${PVMM_SUITE_SECONDS:-400}" -gt 0 ]; then
    echo "--- $name: the same suite restricted to one GPU (CUDA_VISIBLE_DEVICES=0) ---"
    CUDA_VISIBLE_DEVICES=0 "$build/tests/pvmm_conformance" >"$log/conformance-1gpu.log" 2>&1
    local one_rc=$?
    echo "$name: single-GPU suite rc=$one_rc"; tail -3 "$log/conformance-1gpu.log"
    [ $one_rc -eq 0 ] || overall=1
  fi
  echo "--- $name: examples ---"
  local example
  for example in vector_add grow multi_gpu_stripes team_kernel team_oneshot team_signals team_ring ipc_ring ipc_ring_gpu pool_ipc pool_ipc_gpu pool_loop unified_memory pinned_transfer multicast_allreduce; do
    [ -x "$build/examples/pvmm_example_$example" ] || continue
    case $example in team_kernel | team_oneshot | team_signals | team_ring) true ;; *) false ;; esac
    if [ $? -eq 0 ]; then "$build/examples/pvmm_example_$example" --spawn 4  # 4 processes, one GPU
    else "$build/examples/pvmm_example_$example"; fi
    local rc=$?
    if [ $example = multicast_allreduce ]; then
      echo "$name: $example rc=$rc (must refuse: PVMM_ENABLE_MULTICAST_TESTS unset)"
    else
      echo "$name: $example rc=$rc"
      [ $rc -eq 0 ] || overall=1
    fi
  done
}

verify_python() {  # verify_python <backend>: the Python package for <backend>, python/tests with test_gpu.py
  local log=$out/python-$1
  echo "=== python ($1) ==="
  mkdir -p "$log"
  CMAKE_PREFIX_PATH="$PWD/.deps/root/usr" LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu:$PWD/.deps/root/usr/lib:${LD_LIBRARY_PATH:-}" \
    PVMM_BACKEND=$1 PVMM_PY_VENV=0 CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" bash tools/python-test.sh >"$log/python.log" 2>&1
  local rc=$?
  tail -30 "$log/python.log"
  echo "python ($1): rc=$rc"
  [ $rc -eq 0 ] || overall=1
}

for backend in ${PVMM_VERIFY:-cuda hip-nvidia}; do
  case $backend in
    cuda) verify cuda -DPVMM_BACKEND=cuda ;;
    host) verify host -DPVMM_BACKEND=host ;;  # the CI suite on a machine with cores to spare
    python) verify_python cuda ;;
    python-hip-nvidia)
      if [ -f .deps/hip-nvidia/include/hip/nvidia_detail/nvidia_hip_runtime_api.h ]; then
        PVMM_PY_CMAKE_ARGS="-Ccmake.define.PVMM_HIP_PLATFORM=nvidia -Ccmake.define.PVMM_HIP_ROOT=$PWD/.deps/hip-nvidia" \
          verify_python hip
      else
        echo "python-hip-nvidia: not built (no .deps/hip-nvidia: run tools/fetch-deps.sh where ../shared exists)"
        overall=1
      fi
      ;;
    hip-nvidia)
      if [ -f .deps/hip-nvidia/include/hip/nvidia_detail/nvidia_hip_runtime_api.h ]; then
        verify hip-nvidia -DPVMM_BACKEND=hip -DPVMM_HIP_PLATFORM=nvidia -DPVMM_HIP_ROOT="$PWD/.deps/hip-nvidia"
      else
        echo "hip-nvidia: not built (no .deps/hip-nvidia: run tools/fetch-deps.sh where ../shared exists)"
        overall=1
      fi
      ;;
    *) echo "unknown backend '$backend'"; overall=1 ;;
  esac
  pack
done
echo "gpu-verify: overall rc=$overall"
exit $overall
