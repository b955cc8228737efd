#!/usr/bin/env bash
# A consumer that knows pvmm only through pkg-config: compiles pkg_config_consumer.c against the installed prefix
# with `cc $(pkg-config --cflags --libs pvmm)` and runs it. Arguments: install prefix, C compiler, output folder.
set -euo pipefail
prefix=$1 cc=$2 out=$3
pc=$(dirname "$(find "$prefix" -name pvmm.pc -path '*pkgconfig*' | head -1)")
[[ -n $pc ]] || { echo "no pvmm.pc under $prefix"; exit 1; }
export PKG_CONFIG_PATH=$pc
pkg-config --print-errors --exists pvmm
libdir=$(pkg-config --variable=libdir pvmm)
mkdir -p "$out"
# shellcheck disable=SC2046  # pkg-config's flags are meant to split
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic "$(dirname "$0")/pkg_config_consumer.c" -o "$out/pkg_config_consumer" \
  $(pkg-config --cflags --libs pvmm) -Wl,-rpath,"$libdir"
"$out/pkg_config_consumer"
