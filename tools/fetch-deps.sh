#!/usr/bin/env bash
# The GPU machines have no package manager: this fetches the build dependencies pvmm takes from Debian (fmt,
# doctest) here and unpacks them into .deps/root (git-ignored), which the device runs carry along.
# It also copies HIP's NVIDIA-platform headers from ../shared/reference/hip-nvidia into .deps/hip-nvidia, for the
# hip backend built on NVIDIA GPUs there (the device machines have no ../shared).
# Usage: tools/fetch-deps.sh     then: run with carry [".deps"] and tools/gpu-verify.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download libfmt-dev libfmt9 doctest-dev >/dev/null)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
rm -rf .deps/debs
echo "unpacked into .deps/root: $(ls .deps/root/usr/lib/x86_64-linux-gnu/cmake 2>/dev/null | tr '\n' ' ')$(ls .deps/root/usr/lib/cmake 2>/dev/null | tr '\n' ' ')"
if [ -d ../shared/reference/hip-nvidia/include ]; then
  rm -rf .deps/hip-nvidia && mkdir -p .deps/hip-nvidia && cp -r ../shared/reference/hip-nvidia/include .deps/hip-nvidia/
  echo "copied HIP's NVIDIA-platform headers into .deps/hip-nvidia"
else
  echo "note: no ../shared/reference/hip-nvidia here; the hip backend on NVIDIA will not be built on the GPU machine"
fi
