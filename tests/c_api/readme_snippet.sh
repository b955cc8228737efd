#!/usr/bin/env bash
# The README's C example, as written: extracts the first ```c block of its "C interface" section, compiles it as a
# strict C11 program against the built library and runs it. Arguments: README, include dir, library, C compiler.
set -euo pipefail
readme=$1 include=$2 library=$3 cc=$4
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
awk '/^## C interface/ {in_section = 1} in_section && /^```c$/ {on = 1; next} on && /^```$/ {exit} on {print}' \
  "$readme" >"$out/snippet.c"
[[ -s $out/snippet.c ]] || { echo "no C block in the README's C interface section"; exit 1; }
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I"$include" "$out/snippet.c" -o "$out/snippet" "$library" \
  -Wl,-rpath,"$(dirname "$library")"
output=$("$out/snippet" 2>&1) && status=0 || status=$?
if grep -qE "backend_unavailable|runtime_too_old" <<<"$output"; then  # no usable driver or device here (CI)
  echo "[pvmm-skip] the README's C example needs a device: $output"
  exit 0
fi
echo "$output"
exit "$status"
