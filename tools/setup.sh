#!/usr/bin/env bash
# Everything a fresh Debian machine needs, then the job:
#   tools/setup.sh info   build for the backend that fits this machine (cuda, hip, else host) and run
#                         pvmm-info --check
#   tools/setup.sh test   build every backend this machine can compile (host always; cuda, and hip on HIP's
#                         NVIDIA platform (built only), where the CUDA toolkit is; hip with Debian's ROCm
#                         packages, its suite only where an AMD GPU is) with warnings as errors, run each suite;
#                         then the reliability builds: the host suite under ASan + UBSan and under TSan, and
#                         each libFuzzer target for PVMM_FUZZ_SECONDS (default 10; tools/fuzz.sh for long runs) — clang from Debian; and
#                         every C++ source checked against .clang-format; Open MPI (Debian's) for the team
#                         cases under mpirun
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=0
install_missing() {
  local missing=() p
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  if [ $apt_updated -eq 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# One attribute of the <testsuite> element of a CTest JUnit file (attributes span several lines there).
junit_count() { tr '\n\t' '  ' <"$1" | grep -o '<testsuite [^>]*>' | sed -n "s/.* $2=\"\([0-9]*\)\".*/\1/p"; }

# The names of the failed test cases in a CTest JUnit file, one a line.
junit_failed() {
  python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("failure") is not None or case.get("status") == "fail":
        print(case.get("name"))
PY
}

cuda_toolkit() { [ -f /usr/local/cuda/include/cuda.h ] || [ -f /usr/include/cuda.h ]; }
nvidia_gpu() { [ -e /dev/nvidiactl ] && ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; }
amd_gpu() { [ -e /dev/kfd ]; }

base_packages=(cmake ninja-build g++ libfmt-dev doctest-dev)

case "${1:-}" in
  info)
    install_missing "${base_packages[@]}"
    backend=host
    if nvidia_gpu && cuda_toolkit; then backend=cuda
    elif amd_gpu; then install_missing libamdhip64-dev; backend=hip; fi
    cmake --preset "$backend" >/dev/null
    cmake --build --preset "$backend" --target pvmm-info
    exec "build/$backend/tools/pvmm-info" --check
    ;;
  test)
    # Open MPI: the team layer's MPI bootstrap adapter and its cases under mpirun (localhost, oversubscribed).
    install_missing "${base_packages[@]}" openmpi-bin libopenmpi-dev valgrind  # valgrind: the cost guard, below
    backends=(host)
    # hip-nvidia is built (not run: no GPU here) to keep the driverless build of HIP's NVIDIA platform working:
    # the library (tools/gpu-verify.sh builds its tools, examples and tests and runs them where there is a GPU).
    if cuda_toolkit; then
      backends+=(cuda)
      [ -d ../shared/reference/hip-nvidia/include ] && backends+=(hip-nvidia)  # HIP's NVIDIA-platform headers
    else echo "note: no CUDA toolkit here; the cuda and hip-nvidia backends are not compiled"; fi
    # hip: Debian's ROCm runtime and headers, plus a compile check against the newest headers Debian has.
    install_missing libamdhip64-dev hipcc
    TIMEFORMAT="time: fetch-rocm-headers: %0R s wall"
    time bash tools/fetch-rocm-headers.sh build/rocm-unstable >/dev/null
    backends+=(hip)
    # Reliability: sanitizers and fuzzing need clang and its runtimes (libFuzzer, ASan, UBSan, TSan).
    install_missing clang libclang-rt-14-dev
    backends+=(host-asan host-tsan fuzz)
    export PVMM_FUZZ_SECONDS="${PVMM_FUZZ_SECONDS:-10}"  # five targets, two at a time; tools/fuzz.sh for long runs
    total=0 failed=0 skipped=0
    summary=()  # one line per failure, printed again at the end (CI shows a log's tail)
    # Formatting: every C++ source as .clang-format says (Debian's clang-format), or the run fails naming the files.
    install_missing clang-format
    echo "time: packages and setup: ${SECONDS} s wall"
    echo "=== clang-format ==="
    mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' 2>/dev/null || find include src backends tests tools examples -name '*.[ch]pp' -o -name '*.cu')
    unformatted=$( (clang-format --dry-run --Werror "${sources[@]}" 2>&1 || true) | sed -n 's/^\([^ :]*\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u)
    if [ -n "$unformatted" ]; then
      failed=$((failed + 1)); echo "clang-format: not formatted (run clang-format -i on them):"; echo "$unformatted"
      summary+=("failed: clang-format: $(echo "$unformatted" | tr '\n' ' ')")
    else
      echo "clang-format: ${#sources[@]} files formatted"
    fi
    # Sizes: no source, header, test or script over 400 lines (docs/conventions.md); repetition counted where the
    # `duplicates` command exists (it is not packaged: CI machines print that they lack it).
    echo "=== file sizes ==="
    mapfile -t sized < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.py' '*.pyi' '*.sh' 2>/dev/null ||
      find include src backends tests tools examples python -type f \( -name '*.[ch]pp' -o -name '*.h' -o \
        -name '*.cu' -o -name '*.py' -o -name '*.pyi' -o -name '*.sh' \))
    sizes=$(printf '%s\0' "${sized[@]}" | xargs -0 -r wc -l | grep -v ' total$' | sort -n || true)
    largest=$(tail -n 1 <<<"$sizes")
    echo "largest file: ${largest:-none}"
    over=$(awk '$1 > 400' <<<"$sizes")
    if [ -n "$over" ]; then
      failed=$((failed + 1)); echo "file sizes: over 400 lines (split by concern):"; echo "$over"
      summary+=("failed: file sizes: $(echo "$over" | tr '\n' ' ')")
    fi
    if command -v duplicates >/dev/null; then
      echo "repetition: $(duplicates --seconds 60 | head -n 1)"
    else
      echo "repetition: not counted (no \`duplicates\` command here)"
    fi
    # CMake's default generator (Unix Makefiles) builds what the presets' Ninja builds: Make, unlike Ninja, makes no
    # output folder for a custom command, so the rules that have one (the signal module) are built with it. With
    # the CUDA toolkit: the cuda backend's signal module (nvcc); without: the host library.
    echo "=== default generator (Unix Makefiles) ==="
    TIMEFORMAT="time: default generator: %0R s wall, %0U s user, %0S s sys"
    make_backend=host make_target=pvmm_host
    if cuda_toolkit; then make_backend=cuda make_target=pvmm_signal_module_cuda; fi
    install_missing make
    rm -rf build/make-default
    status=0
    time { { cmake -S . -B build/make-default -G "Unix Makefiles" -DPVMM_BACKEND=$make_backend \
               -DPVMM_BUILD_TESTS=OFF -DPVMM_BUILD_TOOLS=OFF -DPVMM_BUILD_EXAMPLES=OFF >/dev/null &&
             cmake --build build/make-default --target $make_target -j 2 >/dev/null; } || status=$?; }
    if [ $status -ne 0 ]; then
      failed=$((failed + 1)); echo "default generator: the $make_backend backend's $make_target did not build with make"
      summary+=("failed: the default generator (Unix Makefiles) build")
    else
      echo "default generator: $make_backend backend, $make_target built with make"
    fi
    for b in "${backends[@]}"; do
      echo "=== backend: $b ==="
      rm -f "build/$b/junit.xml"
      status=0
      # Each stage's time (wall, and CPU of all its processes): where CI's time goes, read from its log.
      TIMEFORMAT="time: backend $b: %0R s wall, %0U s user, %0S s sys"
      if [ "$b" = hip ] && ! amd_gpu; then
        # No AMD GPU here: every hip device case would only skip, and the cases that need no device ran in the host
        # stage; the backend (with its compile checks against the newest ROCm and HIP-on-NVIDIA headers), the tools
        # and the examples are built. An AMD machine runs the whole hip suite (tools/setup.sh test there).
        time { { cmake --preset hip -DPVMM_BUILD_TESTS=OFF >/dev/null && cmake --build --preset hip; } || status=$?; }
      else
        time { cmake --workflow --preset "$b" || status=$?; }
      fi
      if [ -f "build/$b/junit.xml" ]; then
        t=$(junit_count "build/$b/junit.xml" tests)
        f=$(junit_count "build/$b/junit.xml" failures)
        s=$(junit_count "build/$b/junit.xml" skipped)
        total=$((total + t)) skipped=$((skipped + s))
        if [ "${f:-0}" -gt 0 ]; then
          # A case that failed beside the others (2 cores shared by the parallel run) runs again alone: one that
          # passes then is reported as flaky, by name, not counted as failed; one that fails again is a failure.
          names=$(junit_failed "build/$b/junit.xml" | tr '\n' ';' || true)
          echo "--- backend $b: the failed tests again, one at a time, by name (tools/ctest-rerun-failed.sh) ---"
          if bash tools/ctest-rerun-failed.sh "build/$b" --output-on-failure >"build/$b/rerun.log" 2>&1; then
            summary+=("flaky (failed beside others, passed alone): backend $b: $names")
            status=0
          else
            failed=$((failed + f))
            tail -n 60 "build/$b/rerun.log"
            summary+=("failed: backend $b: $names (log build/$b/rerun.log)")
          fi
        fi
      fi
      if [ $status -ne 0 ]; then
        failed=$((failed + 1)); echo "backend $b: workflow failed (status $status)"
        summary+=("failed: backend $b: the workflow (configure, build or test) ended with status $status")
      fi
    done
    # Cost guard: instructions per warm call against the null driver, counted by callgrind (tools/cost-guard.py).
    if [ -x build/cuda/tools/pvmm-own-cost ]; then
      echo "=== cost guard ==="; total=$((total + 1))
      python3 tools/cost-guard.py --binary build/cuda/tools/pvmm-own-cost || {
        failed=$((failed + 1)); echo "cost guard: failed"; summary+=("failed: cost guard"); }
    fi
    # Python: the package (host backend, the host preset's unity build) and its pytest suite (tools/python-test.sh).
    echo "=== python ==="
    install_missing python3-venv python3-dev  # the venv and Python's headers; the rest comes from PyPI
    TIMEFORMAT="time: python: %0R s wall, %0U s user, %0S s sys"
    pystatus=0
    time { bash tools/python-test.sh >build/python-test.log 2>&1 || pystatus=$?; }
    tail -n 25 build/python-test.log
    if [ $pystatus -ne 0 ]; then
      failed=$((failed + 1)); echo "python: failed (status $pystatus, log build/python-test.log)"
      summary+=("failed: python (status $pystatus): $(grep -E '^(FAILED|ERROR) ' build/python-test.log | head -n 5 | tr '\n' ';')")
    else
      p=$(sed -n 's/^=* *\([0-9][0-9]*\) passed.*/\1/p' build/python-test.log | tail -n 1)
      total=$((total + ${p:-0}))
    fi
    echo "time: total ${SECONDS} s wall"
    for line in "${summary[@]}"; do echo "$line"; done
    echo "pvmm: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
    [ $failed -eq 0 ]
    ;;
  *)
    echo "usage: tools/setup.sh info|test" >&2
    exit 2
    ;;
esac
