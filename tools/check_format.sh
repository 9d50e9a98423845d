#!/usr/bin/env bash
# Checks every tracked C++/CUDA source against .clang-format (clang-format-14).
# Exit 1 listing the files that differ; --fix rewrites them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: $clang_format not found (apt-get install clang-format-14)" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' ':!:third_party/**')
if [ $fix -eq 1 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -P"$(nproc)" -n 16 "$clang_format" -i --style=file
  exit 0
fi

# Each batch that differs names its files; clang-format's own report is left out.
# shellcheck disable=SC2016  # expanded by the inner sh
mapfile -t offenders < <(printf '%s\0' "${files[@]}" | xargs -0 -P"$(nproc)" -n 16 sh -c \
  'for f; do "$0" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || echo "$f"; done' "$clang_format" | sort)
if [ ${#offenders[@]} -gt 0 ]; then
  echo "check_format: ${#offenders[@]} file(s) not formatted (fix: tools/check_format.sh --fix):"
  printf '  %s\n' "${offenders[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
