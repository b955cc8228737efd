#!/usr/bin/env bash
# Builds and runs the raw-driver pool probes of tools/probes with nvcc, in two variants:
#   cuda        the CUDA runtime API
#   hip-nvidia  the same source through HIP's NVIDIA-platform headers (-DPROBE_HIP -D__HIP_PLATFORM_NVIDIA__), found in
#               .deps/hip-nvidia/include (tools/fetch-deps.sh; carry ".deps" to a device run) or
#               ../shared/reference/hip-nvidia/include; skipped, and said so, when neither exists.
# Usage: tools/probes/run.sh          (binaries in build/probes; outputs in $OUT when set, else build/probes/out)
# Every probe runs under `timeout`; the probes bound their own waits as well.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
bin=build/probes
out=${OUT:-$bin/out}
mkdir -p "$bin" "$out"
: >"$out/build.log"
overall=0

hip_inc=
for d in .deps/hip-nvidia/include ../shared/reference/hip-nvidia/include; do
  if [ -f "$d/hip/nvidia_detail/nvidia_hip_runtime_api.h" ]; then hip_inc=$d; break; fi
done

{
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/gpu /'
  nvcc --version | tail -2
  echo "hip headers: ${hip_inc:-none}"
} | tee "$out/device.txt"

build() {  # build <variant> <probe>
  local variant=$1 probe=$2 flags=(-std=c++17 -O2 -Xcompiler -Wall,-Wextra)
  if [ "$variant" = hip-nvidia ]; then flags+=(-DPROBE_HIP -D__HIP_PLATFORM_NVIDIA__ -isystem "$hip_inc"); fi
  echo "--- nvcc ${flags[*]} -o $bin/${probe}_$variant tools/probes/$probe.cpp" >>"$out/build.log"
  nvcc "${flags[@]}" -o "$bin/${probe}_$variant" "tools/probes/$probe.cpp" >>"$out/build.log" 2>&1 ||
    { echo "BUILD FAILED: $probe ($variant)"; tail -30 "$out/build.log"; overall=1; return 1; }
}

variants="cuda"
if [ -n "$hip_inc" ]; then variants="cuda hip-nvidia"; else echo "hip-nvidia: skipped (no HIP NVIDIA-platform headers)"; fi
for variant in $variants; do
  for probe in pool_reuse pool_import_twice device_memory_kept pool_chunks; do
    build "$variant" "$probe" || continue
    echo "===== $probe ($variant) ====="
    timeout 200 "$bin/${probe}_$variant" >"$out/${probe}_$variant.txt" 2>&1
    rc=$?
    echo "exit $rc" >>"$out/${probe}_$variant.txt"
    [ $rc -eq 0 ] || overall=1
    if [ $probe = pool_reuse ]; then grep -v '^detail ' "$out/${probe}_$variant.txt"; else cat "$out/${probe}_$variant.txt"; fi
  done
done
# The pvmm-based probe (exporter_death): built with pvmm's tools by the cuda and hip-nvidia presets.
for variant in cuda hip-nvidia; do
  probe=build/$variant/tools/pvmm-probe-exporter-death
  if [ ! -x "$probe" ]; then echo "exporter_death ($variant): not built (cmake --preset $variant && cmake --build build/$variant --target pvmm-probe-exporter-death)"; continue; fi
  echo "===== exporter_death ($variant) ====="
  timeout 200 "$probe" >"$out/exporter_death_$variant.txt" 2>&1
  rc=$?
  echo "exit $rc" >>"$out/exporter_death_$variant.txt"
  [ $rc -eq 0 ] || overall=1
  cat "$out/exporter_death_$variant.txt"
done
echo "probes: overall rc=$overall (per-trial detail lines in $out/pool_reuse_*.txt)"
exit $overall
