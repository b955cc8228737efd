#!/usr/bin/env bash
# CTest's doctest discovery splits a test case name at ';' into entries that run no case and pass: none may hold one.
set -euo pipefail
names=$("$1" --list-test-cases)
if grep -F ';' <<<"$names"; then
  echo "the test case names above hold ';': CTest would run none of them (use ',')"
  exit 1
fi
