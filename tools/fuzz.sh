#!/usr/bin/env bash
# A longer fuzz run than CI's 10 s per target: tools/fuzz.sh [seconds per target, default 3600] [target ...]
# Builds the fuzz preset (clang, ASan + UBSan, host backend) and runs each target from its seed corpus; new
# inputs go to build/fuzz/tests/fuzz/corpus/<target>, crashes to the current directory (crash-*).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-3600}
shift || true
targets=("$@")
# Every target tests/fuzz/CMakeLists.txt builds (its foreach list), unless some are named.
[ ${#targets[@]} -gt 0 ] || read -r -a targets < <(sed -n 's/^foreach(target \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)
cmake --preset fuzz -DPVMM_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build --preset fuzz
for t in "${targets[@]}"; do
  echo "=== fuzz_$t for ${seconds}s"
  "build/fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    "build/fuzz/tests/fuzz/corpus/$t" "tests/fuzz/corpus/$t"
done
