#!/usr/bin/env bash
# Self-test of the Soft-RoCE VM: in one guest boot, checks that rxe0 is listed, ACTIVE,
# Ethernet (RoCE) with an IPv4 GID, and that a 2-process ibv_rc_pingpong (server in the
# background, client to 127.0.0.1, GID index 1) completes. Prints PASS or FAIL.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: tools/rdma_vm/selftest.sh [--timeout SECONDS] [--iters N] [-v]
  --timeout SECONDS  bound on the whole VM (default 180)
  --iters N          ibv_rc_pingpong iterations (default 1000)
  -v                 show the guest's output even on success
USAGE
}
timeout_s=180 iters=1000 verbose=0
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) [ $# -ge 2 ] || { usage >&2; exit 2; }; timeout_s=$2; shift 2 ;;
    --iters) [ $# -ge 2 ] || { usage >&2; exit 2; }; iters=$2; shift 2 ;;
    -v) verbose=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "selftest.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$iters" =~ ^[1-9][0-9]*$ ]] || { echo "selftest.sh: --iters must be a positive integer, got '$iters'" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Runs in the guest (bash). show_gids is not packaged in Debian 12: fall back to sysfs.
# shellcheck disable=SC2016  # expanded by the guest's bash
guest_script='
set -u
show_gids_sysfs() {
  printf "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4\t\tVER\tDEV\n"
  for d in /sys/class/infiniband/*; do
    for p in "$d"/ports/*; do
      for g in "$p"/gids/*; do
        # builtin reads only: the GID table has hundreds of (mostly empty) entries
        i=${g##*/}; gid=; read -r gid <"$g" 2>/dev/null || continue
        [ "$gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
        ver="?"; read -r ver <"$p/gid_attrs/types/$i" 2>/dev/null
        nd="?"; read -r nd <"$p/gid_attrs/ndevs/$i" 2>/dev/null
        v4=""
        case "$gid" in
          0000:0000:0000:0000:0000:ffff:*)
            h=${gid#0000:0000:0000:0000:0000:ffff:}; h=${h/:/}
            v4=$((16#${h:0:2})).$((16#${h:2:2})).$((16#${h:4:2})).$((16#${h:6:2})) ;;
        esac
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "${d##*/}" "${p##*/}" "$i" "$gid" "$v4" "$ver" "$nd"
      done
    done
  done
}
echo "== ibv_devices"; ibv_devices
echo "== ibv_devinfo -d rxe0"; ibv_devinfo -d rxe0 | grep -E "state|link_layer"
echo "== show_gids"
if command -v show_gids >/dev/null; then show_gids; else show_gids_sysfs; fi
echo "== ibv_rc_pingpong"
port=18515
timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -p $port -n "$ITERS" >/tmp/server.log 2>&1 &
srv=$!
for ((i = 0; i < 200; i++)); do
  ss -Hltn "sport = :$port" | grep -q . && break
  sleep 0.05
done
timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -p $port -n "$ITERS" 127.0.0.1 >/tmp/client.log 2>&1
crc=$?
wait $srv; src=$?
sed "s/^/server: /" /tmp/server.log; sed "s/^/client: /" /tmp/client.log
echo "pingpong_rc server=$src client=$crc"
'

log=$(mktemp "${TMPDIR:-/tmp}/chorus-rdma-selftest.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$(date +%s.%N)
set +e
CHORUS_SELFTEST_ITERS=$iters "$here/run.sh" --timeout "$timeout_s" -- \
  bash -c "ITERS=\$CHORUS_SELFTEST_ITERS; $guest_script" </dev/null >"$log" 2>&1
rc=$?
set -e
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

problems=()
[ "$rc" = 0 ] || problems+=("run.sh exited $rc")
grep -qE '^[[:space:]]+rxe0[[:space:]]' "$log" || problems+=("ibv_devices does not list rxe0")
grep -qE 'state:[[:space:]]+PORT_ACTIVE' "$log" || problems+=("rxe0 port is not PORT_ACTIVE")
grep -qE 'link_layer:[[:space:]]+Ethernet' "$log" || problems+=("rxe0 link_layer is not Ethernet")
grep -qE '^rxe0[[:space:]]+1[[:space:]]+1[[:space:]].*10\.77\.0\.1' "$log" || problems+=("no IPv4 GID 10.77.0.1 at index 1")
grep -q '^pingpong_rc server=0 client=0$' "$log" || problems+=("ibv_rc_pingpong failed")
grep -qE "^client: .* bytes in .* seconds" "$log" || problems+=("no ibv_rc_pingpong client result")

if [ ${#problems[@]} -eq 0 ]; then
  [ "$verbose" = 1 ] && cat "$log"
  usec=$(sed -n 's/^client: .* = \([0-9.]*\) usec\/iter.*/\1/p' "$log" | head -n 1)
  echo "PASS: rxe0 ACTIVE (RoCE, GID 1 = 10.77.0.1); ibv_rc_pingpong $iters iters, ${usec:-?} usec/iter; whole run ${elapsed} s"
  exit 0
fi
cat "$log"
msg=$(printf '%s; ' "${problems[@]}")
echo "FAIL: ${msg%; }"
exit 1
