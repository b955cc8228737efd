#!/usr/bin/env bash
# What libpvmm_<backend>.so exports (cmake/pvmm.map): every C symbol starts with pvmm_, every C++ one is pvmm's own
# (its demangled name holds pvmm::), and the C interface's entry points declared in pvmm.h and its parts
# (pvmm/c/*.h) are all there.
set -euo pipefail
lib=$1
header=$2
symbols=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}')
bad_c=$(grep -v '^_Z' <<<"$symbols" | grep -v '^pvmm_' || true)
bad_cxx=$(grep '^_Z' <<<"$symbols" | c++filt | grep -v 'pvmm::' || true)
headers=("$header" "$(dirname "$header")"/c/*.h)
missing=$(grep -ho 'PVMM_C_API [^(]*\bpvmm_[a-z_0-9]*(' "${headers[@]}" | grep -o 'pvmm_[a-z_0-9]*($' | tr -d '(' |
  sort -u | while read -r f; do
  grep -qx "$f" <<<"$symbols" || echo "$f"; done)
status=0
if [[ -n $bad_c ]]; then echo "C symbols outside pvmm_:"; echo "$bad_c"; status=1; fi
if [[ -n $bad_cxx ]]; then echo "C++ symbols that are not pvmm's:"; echo "$bad_cxx" | head -20; status=1; fi
if [[ -n $missing ]]; then echo "pvmm.h entry points not exported:"; echo "$missing"; status=1; fi
echo "exports: $(grep -c '^pvmm_' <<<"$symbols") pvmm_ C symbols, $(grep -c '^_Z' <<<"$symbols") C++ symbols"
exit $status
