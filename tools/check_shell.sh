#!/usr/bin/env bash
# Runs shellcheck (settings in .shellcheckrc) on every tracked shell script: *.sh and
# files whose first line names sh or bash. Exit 1 on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v shellcheck >/dev/null; then
  echo "check_shell: shellcheck not found (apt-get install shellcheck)" >&2
  exit 2
fi

scripts=()
while IFS= read -r f; do
  case "$f" in
    *.sh) scripts+=("$f") ;;
    *) if head -n 1 "$f" | grep -qE '^#!.*\b(ba)?sh\b'; then scripts+=("$f"); fi ;;
  esac
done < <(git ls-files)

if shellcheck -x "${scripts[@]}"; then
  echo "check_shell: ${#scripts[@]} scripts clean"
else
  echo "check_shell: findings above (${#scripts[@]} scripts checked)"
  exit 1
fi
