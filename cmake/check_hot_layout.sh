#!/usr/bin/env bash
# cmake/check_hot_layout.sh LIBRARY BACKEND SOURCE_DIR: the CTest tools/hot_layout (tests/CMakeLists.txt). Reads the
# built library's sections and symbols (readelf) and fails
#   - when a pattern of cmake/hot_layout.ld places no function or variable of LIBRARY in the hot sections
#     (.text.pvmm_hot, .data.pvmm_hot): a function renamed or re-signatured falls out of the layout silently
#     otherwise. A pattern naming a backend's namespace (_ZN4pvmm4cuda..., _ZN4pvmm3hip..., _ZN4pvmm4host...), or
#     on a line ending in "/* cuda only */" (backends separated by commas), is checked in those builds only.
#   - where the library has line tables (-g), when a project file that defines a laid-out function lacks the banner
#     naming cmake/hot_layout.ld in its opening lines (the warning a reader sees before renaming one).
set -euo pipefail
lib=$1 backend=$2 source_dir=$3
layout=$source_dir/cmake/hot_layout.ld
readelf=${READELF:-readelf}

sections=$("$readelf" -SW "$lib")
index_of() { sed -n "s/^ *\[ *\([0-9]*\)\] $1 .*/\1/p" <<<"$sections"; }
text=$(index_of '\.text\.pvmm_hot')
data=$(index_of '\.data\.pvmm_hot')
if [ -z "$text" ] || [ -z "$data" ]; then
  echo "hot layout: $lib has no .text.pvmm_hot or .data.pvmm_hot section: the linker did not take $layout"
  exit 1
fi
# "<section index> <address> <name>" of every function and variable in a hot section (.dynsym and .symtab alike).
mapfile -t placed < <("$readelf" -sW "$lib" | awk -v t="$text" -v d="$data" \
  '($7 == t || $7 == d) && ($4 == "FUNC" || $4 == "OBJECT") { sub(/@.*/, "", $8); print $7, $2, $8 }' | sort -u)

# A pattern that places nothing is no rename when the function still exists, inline, in a header: a compiler may
# inline every call (GCC 13+ at -O2 does spin_lock::lock and inject_failure_now), leaving no symbol to place. The
# library cannot tell the two apart (neither leaves a symbol; an inline function left uncalled out of line is not
# emitted in any object either), the sources can: the demangled name's last two components (scope, function) must
# still be defined in a header of src/ or backends/ that declares the scope. Prints that header.
defined_inline() {
  local p name demangled scope function header
  for p in "$@"; do
    name=${p#.text.}
    [[ $name == _Z* && $name != *[*?[]* ]] || continue  # a glob names no one function
    demangled=$(c++filt "$name" 2>/dev/null) || continue
    [ "$demangled" != "$name" ] || continue
    demangled=${demangled%%(*}                            # pvmm::detail::spin_lock::lock
    function=${demangled##*::} scope=${demangled%::*} scope=${scope##*::}
    if [ -z "$function" ] || [ -z "$scope" ] || [ "$scope" = "$demangled" ]; then continue; fi
    # A definition (not a call: no "." or "->" before the name, no ";" after the parameters) in a header that
    # declares the scope (class, struct or namespace).
    header=$(grep -rlE --include='*.hpp' --include='*.h' \
      "(^|[[:space:]*&])${function}[[:space:]]*\\([^;]*\\)[^;]*(\\{|$)" "$source_dir/src" "$source_dir/backends" \
      2>/dev/null | xargs -r grep -lE -- "(class|struct|namespace)[[:space:]]+([[:alnum:]_]+::)*${scope}([^[:alnum:]_]|$)" |
      head -n 1) || continue
    [ -n "$header" ] || continue
    echo "${header#"$source_dir"/}"
    return 0
  done
  return 1
}

failed=0 checked=0 inlined=0 addresses=()
# Each input-section statement "*(.text.X ...)" of the script: one or more section-name patterns; a line that ends
# in a comment "/* <backend>[, <backend>] only */" is checked in those backends' builds only.
while read -r line; do
  statement=$(grep -o '\*([^)]*)' <<<"$line") || continue
  read -ra patterns <<<"$(sed 's/[()]/ /g; s/^ *\* *//' <<<"$statement")"
  other_backend=0
  if only=$(sed -n 's#.*/\* *\([a-z, ]*\) only *\*/.*#\1#p' <<<"$line") && [ -n "$only" ]; then
    [[ ", $only," == *", $backend,"* ]] || other_backend=1
  fi
  for p in "${patterns[@]}"; do
    for b in cuda:4cuda hip:3hip host:4host; do
      [[ $p == *_ZN4pvmm${b#*:}* && ${b%%:*} != "$backend" ]] && other_backend=1
    done
  done
  [ $other_backend -eq 1 ] && continue
  checked=$((checked + 1))
  found=""
  for p in "${patterns[@]}"; do
    if [[ $p == .text.* ]]; then want=$text name=${p#.text.}; else want=$data name=${p#.*.}; fi
    for entry in "${placed[@]}"; do
      read -r index address symbol <<<"$entry"
      # shellcheck disable=SC2053  # the pattern is a glob, as the linker reads it
      if [ "$index" = "$want" ] && [[ $symbol == $name ]]; then
        found=$symbol
        [ "$want" = "$text" ] && addresses+=("$address")
      fi
    done
  done
  if [ -z "$found" ] && inline_source=$(defined_inline "${patterns[@]}"); then
    inlined=$((inlined + 1))
    echo "hot layout: *(${patterns[*]}) places nothing: every call was inlined (defined inline in $inline_source)"
  elif [ -z "$found" ]; then
    failed=$((failed + 1))
    echo "hot layout: no function or variable of $(basename "$lib") matches *(${patterns[*]})" \
      "(renamed or re-signatured? update $layout: tools/own-cost-lines.py --functions --mangled lists the hot ones)"
  fi
done < <(grep '\*(' "$layout")
echo "hot layout: $checked patterns of $layout checked against $(basename "$lib"), $failed matching nothing," \
  "$inlined inlined everywhere"

# The files that define the laid-out functions, from the library's line tables: each opens with the banner.
if command -v addr2line >/dev/null && [ ${#addresses[@]} -gt 0 ]; then
  # -a -i: each address, then where it is from the innermost inlined call out; the last is the function's own file.
  mapfile -t files < <(addr2line -e "$lib" -a -i "${addresses[@]/#/0x}" 2>/dev/null |
    awk '/^0x/ { if (f != "") print f; f = ""; next } { f = $1 } END { if (f != "") print f }' |
    sed 's/:[0-9?]*$//' | sort -u)
  banners=0
  for f in "${files[@]}"; do
    case $f in "$source_dir"/src/* | "$source_dir"/backends/*) ;; *) continue ;; esac
    banners=$((banners + 1))
    if ! head -n 12 "$f" | grep -q 'hot_layout\.ld'; then
      failed=$((failed + 1))
      echo "hot layout: ${f#"$source_dir"/} defines a laid-out function but its opening lines do not say so" \
        "(a banner naming cmake/hot_layout.ld)"
    fi
  done
  if [ $banners -eq 0 ]; then
    echo "hot layout: no line tables in $(basename "$lib") (built without -g): the banners were not checked"
  else
    echo "hot layout: $banners project files define laid-out code, each checked for its banner"
  fi
fi
[ $failed -eq 0 ]
