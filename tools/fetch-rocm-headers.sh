#!/usr/bin/env bash
# Unpacks the newest HIP headers Debian has (its unstable suite) into a build-local folder, without
# installing them, so the hip backend can be compile-checked against modern ROCm. Usage:
#   tools/fetch-rocm-headers.sh [destination]      (default build/rocm-unstable; prints the include dir)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-build/rocm-unstable}
if [ -f "$dest/usr/include/hip/hip_runtime_api.h" ]; then echo "$PWD/$dest/usr/include"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$dest"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" \
  >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o Dir::State::Status=/var/lib/dpkg/status -o APT::Architecture=amd64
  -o "Dir::Cache::archives=$work" -o Debug::NoLocking=1)
apt-get "${apt_opts[@]}" update -qq >&2
(cd "$work" && apt-get "${apt_opts[@]}" download libamdhip64-dev libhsa-runtime-dev >&2 2>/dev/null) ||
  (cd "$work" && apt-get "${apt_opts[@]}" download libamdhip64-dev libhsa-runtime-dev >&2)
for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest"; done
grep -h 'define HIP_VERSION_M' "$dest/usr/include/hip/hip_version.h" >&2
echo "$PWD/$dest/usr/include"
