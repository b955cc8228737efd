#!/usr/bin/env bash
# tools/ctest-rerun-failed.sh reruns the failed test itself after a filtered run, not the test that has its number in
# the whole list (what `ctest --rerun-failed` did): a CTest directory of three tests, the first filtered out, the
# second failing once.
set -euo pipefail
script=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/CTestTestfile.cmake" <<CTEST
add_test([=[first/passes]=] "true")
add_test([=[second (fails once): x.y]=] "sh" "-c" "test -f $dir/failed-once || { touch $dir/failed-once; exit 1; }")
add_test([=[third]=] "true")
CTEST
if "${CTEST:-ctest}" --test-dir "$dir" -E ^first/ >"$dir/first.log" 2>&1; then
  echo "FAIL: the filtered run should have failed"; exit 1
fi
bash "$script" "$dir" >"$dir/rerun.log" 2>&1 || { cat "$dir/rerun.log"; echo "FAIL: the rerun failed"; exit 1; }
grep -q "Test #[0-9]*: second (fails once): x.y .*Passed" "$dir/rerun.log" || { cat "$dir/rerun.log"; echo "FAIL: the failed test did not run again"; exit 1; }
if grep -q "first/passes" "$dir/rerun.log"; then cat "$dir/rerun.log"; echo "FAIL: another test ran"; exit 1; fi
echo "ok: the rerun ran the failed test by name, and only it"
