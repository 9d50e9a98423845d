#!/usr/bin/env bash
# Small helpers shared by the shell tests in this folder (sourced, not run).

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_contains TEXT NEEDLE [WHAT]
expect_contains() {
  [[ "$1" == *"$2"* ]] || fail "${3:-output} lacks '$2'; got:"$'\n'"$1"
}

expect_eq() {
  [[ "$1" == "$2" ]] || fail "${3:-value}: expected '$2', got '$1'"
}

# A bash snippet, run as: bash -c "$TCP_CLIENT" ADDR PORT MESSAGE. Connects (retrying
# for 5 s while the listener starts), sends MESSAGE and prints the one-line reply.
# shellcheck disable=SC2016,SC2034  # expanded by the inner bash; used by the sourcing test
TCP_CLIENT='for _ in $(seq 50); do { exec 3<>"/dev/tcp/$0/$1"; } 2>/dev/null && break; sleep 0.1; done
{ echo "$2" >&3; } 2>/dev/null || { echo "cannot connect to $0:$1" >&2; exit 1; }
IFS= read -r -t 5 reply <&3 || { echo "no reply from $0:$1" >&2; exit 1; }
echo "$reply"'
