#!/usr/bin/env bash
# Checks that the tracked C++ and CUDA sources are formatted as .clang-format says, without
# changing them: lists each file that clang-format would change and exits 1 if there is one.
# third_party/ is left out (code kept as its authors wrote it).
# Usage: tools/check_format.sh [FILE...]   (default: every tracked .h, .cc, .cu, .cuh)
# To format a file: clang-format -i FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format="${CLANG_FORMAT:-clang-format}"
command -v "$clang_format" >/dev/null || {
  echo "check_format: $clang_format not found (tools/setup.sh installs it)" >&2; exit 2; }

files=("$@")
(( ${#files[@]} )) || mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' ':!:third_party')
# One clang-format over all of them; each place it would change is a line
# "FILE:LINE:COL: error: code should be clang-formatted".
report="$("$clang_format" --dry-run --Werror --style=file "${files[@]}" 2>&1 >/dev/null || true)"
mapfile -t unformatted < <(sed -nE 's/^(.+):[0-9]+:[0-9]+: (error|warning): code should be clang-formatted.*/\1/p' <<<"$report" | uniq)
if [[ -n "$report" ]] && (( ${#unformatted[@]} == 0 )); then
  echo "$report" >&2
  echo "check_format: $clang_format failed" >&2
  exit 2
fi
if (( ${#unformatted[@]} )); then
  printf '  %s\n' "${unformatted[@]}"
  echo "check_format: ${#unformatted[@]} of ${#files[@]} files not formatted ($("$clang_format" --version | head -n 1)); clang-format -i FILE formats one" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
