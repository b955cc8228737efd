#!/usr/bin/env bash
# One team case that kills a rank by SIGKILL (killed-<step>, sig-killed) under mpirun; passes when every survivor
# reported "ok" (mpirun's own status only says a rank died). Open MPI keeps the survivors running with
# orte_abort_on_non_zero_status 0.
#   mpi_killed.sh <mpiexec> <pvmm_team_rank_mpi> <case> <ranks>
set -u
mpiexec=$1 rank_exe=$2 case=$3 n=$4
dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
out=$(timeout 90 "$mpiexec" --oversubscribe --allow-run-as-root --mca btl self,vader \
  --mca orte_abort_on_non_zero_status 0 -np "$n" "$rank_exe" mpi "$case" 0 0 "$dir" 0 2>&1)
if grep -q '\[pvmm-skip\]' <<<"$out"; then grep -m1 '\[pvmm-skip\]' <<<"$out"; exit 0; fi
ok=$(grep -c '^\[pvmm-team\] survivor rank [0-9]*: ok$' <<<"$out")
if [ "$ok" -ne $((n - 1)) ]; then
  echo "$out"
  echo "$case, $n ranks: $ok of $((n - 1)) survivors returned ok"
  exit 1
fi
echo "$case, $n ranks: every survivor returned within its deadline, nothing leaked"
