#!/usr/bin/env bash
# Runs again, one at a time, the tests that the last CTest run in <build> failed, chosen by name.
# Not `ctest --rerun-failed`: it takes the failed tests' numbers and ignores -R, -E and a preset's filter, while a
# filtered run numbers its tests within the filter, so the rerun ran other tests (test #117 of a run with
# `-E ^conformance/` is not #117 of the whole list) and reported them passed.
# Usage: tools/ctest-rerun-failed.sh <build-dir> [more ctest arguments]; exit 0 when every one of them passes.
set -uo pipefail
build=$1
shift
list=$build/Testing/Temporary/LastTestsFailed.log
if [ ! -s "$list" ]; then
  echo "ctest-rerun-failed: $list lists no failed test"
  exit 1
fi
# One anchored alternative per name, with CMake's regex characters escaped (names hold parentheses, dots, colons).
regex=$(sed -e 's/^[0-9]*://' -e 's/[][().*+?^$|\\]/\\&/g' "$list" | paste -sd'|')
# Each name must select exactly one test: a rerun of fewer tests than failed is no rerun.
wanted=$(wc -l <"$list")
selected=$("${CTEST:-ctest}" --test-dir "$build" -N -R "^($regex)\$" | grep -cE "^ *Test +#")
if [ "$selected" -ne "$wanted" ]; then
  echo "ctest-rerun-failed: $wanted tests failed but the names select $selected"
  exit 1
fi
exec "${CTEST:-ctest}" --test-dir "$build" -j1 -R "^($regex)\$" "$@"
