#!/usr/bin/env bash
# Runs a command as root inside a QEMU (TCG) guest that has a Soft-RoCE device rxe0,
# with the host's / shared read-only (tmpfs overlay on top), in the caller's working
# folder. The command's stdout+stderr stream to our stdout; we exit with its exit code.
# VM failures exit 125 (124 on timeout) with a message on stderr.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: tools/rdma_vm/run.sh [--timeout SECONDS] [--out DIR] [--cpus N] [--mem MB] -- COMMAND [ARGS...]
  --timeout SECONDS  bound on the whole VM, boot to power-off (default 600)
  --out DIR          host folder mounted read-write in the guest at the same path
  --cpus N           guest vCPUs (default 2)
  --mem MB           guest memory in MiB (default 2048)
  In the guest: rxe0 on dummy netdev rdmavm0 (10.77.0.1/24), lo up, /tmp a fresh tmpfs,
  HOME=/root, env variables CHORUS_* and GTEST_* passed through.
  Exit: the command's code; 124 timeout; 125 the VM failed (message on stderr).
  CHORUS_RDMA_VM_VERBOSE=1 also shows the kernel console (on stderr).
USAGE
}

die_usage() { echo "run.sh: $*" >&2; usage >&2; exit 2; }
vm_fail() { echo "run.sh: VM failure: $*" >&2; exit 125; }

timeout_s=600 out='' cpus=2 mem=2048
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) [ $# -ge 2 ] || die_usage "--timeout needs a value"; timeout_s=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die_usage "--out needs a value"; out=$2; shift 2 ;;
    --cpus) [ $# -ge 2 ] || die_usage "--cpus needs a value"; cpus=$2; shift 2 ;;
    --mem) [ $# -ge 2 ] || die_usage "--mem needs a value"; mem=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die_usage "unknown argument '$1' (the command goes after --)" ;;
  esac
done
[ $# -gt 0 ] || die_usage "no COMMAND given"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die_usage "--timeout must be a positive integer (seconds), got '$timeout_s'"
[[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die_usage "--cpus must be a positive integer, got '$cpus'"
[[ "$mem" =~ ^[1-9][0-9]*$ ]] && [ "$mem" -ge 256 ] || die_usage "--mem must be an integer >= 256 (MiB), got '$mem'"
if [ -n "$out" ]; then
  [ -d "$out" ] || die_usage "--out $out is not an existing folder"
  out=$(cd "$out" && pwd -P)
  [ "$out" != / ] || die_usage "--out / is not allowed"
  [[ "$out" != *$'\n'* ]] || die_usage "--out path contains a newline"
fi
cwd=$(pwd -P)
[[ "$cwd" != *$'\n'* ]] || vm_fail "the working folder's path contains a newline"
verbose=${CHORUS_RDMA_VM_VERBOSE:-0}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${CHORUS_RDMA_VM_CACHE:-/var/cache/chorus-rdma-vm}
"$here/prepare.sh" || vm_fail "prepare.sh failed (see its message above)"
KERNEL='' INITRD=''
# shellcheck disable=SC1091
. "$cache/vm.env" || vm_fail "cannot read $cache/vm.env"
qemu=$(command -v qemu-system-x86_64) || vm_fail "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
for f in "$KERNEL" "$INITRD"; do [ -r "$f" ] || vm_fail "cannot read $f (run prepare.sh)"; done

rundir=$(mktemp -d "${TMPDIR:-/tmp}/chorus-rdma-vm.XXXXXX") || vm_fail "mktemp -d failed"
qpid='' outpid='' conpid=''
cleanup() {
  for p in $qpid $outpid $conpid; do kill "$p" 2>/dev/null || true; done
  rm -rf "$rundir"
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted; stopping the VM" >&2; exit 130' INT
trap 'echo "run.sh: terminated; stopping the VM" >&2; exit 143' TERM

# Per-run files the guest reads: the command, its env, the working folder.
{
  printf 'CMD_CWD=%q\n' "$cwd"
  printf 'CMD_ARGV=('; printf ' %q' "$@"; printf ' )\n'
  printf 'CMD_ENV=('
  while IFS= read -r name; do
    [[ "$name" =~ ^(CHORUS|GTEST)_ ]] && printf ' %q' "$name=${!name}"
  done < <(compgen -e)
  printf ' )\n'
} >"$rundir/cmd.env"
printf '%s\n' "$cwd" >"$rundir/cwd"
cp "$here/guest_stage2.sh" "$rundir/stage2.sh"
[ -n "$out" ] && printf '%s\n' "$out" >"$rundir/out_dir"

qemu_path() { printf '%s' "${1//,/,,}"; }  # commas are doubled in QEMU option values

mkfifo "$rundir/out.fifo"
cat "$rundir/out.fifo" &
outpid=$!
append="console=ttyS0 panic=-1 rdinit=/init"
if [ "$verbose" = 1 ]; then
  mkfifo "$rundir/console.fifo"
  tee "$rundir/console.log" <"$rundir/console.fifo" >&2 &
  conpid=$!
  con_path=$rundir/console.fifo
else
  append+=" quiet loglevel=3"
  con_path=$rundir/console.log
fi

# shellcheck disable=SC2054  # commas belong to QEMU option values
args=(-accel tcg,thread=multi -cpu max -smp "$cpus" -m "$mem" -M pc
      -nodefaults -no-user-config -no-reboot -display none
      -kernel "$KERNEL" -initrd "$INITRD" -append "$append"
      -chardev "file,id=con,path=$(qemu_path "$con_path")" -serial chardev:con
      -chardev "file,id=out,path=$(qemu_path "$rundir/out.fifo")"
      -device virtio-serial-pci,id=vser0 -device virtserialport,chardev=out,bus=vser0.0,name=chorus.out
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
      -virtfs "local,path=$(qemu_path "$rundir"),mount_tag=chorusrun,security_model=none")
[ -n "$out" ] && args+=(-virtfs "local,path=$(qemu_path "$out"),mount_tag=chorusout,security_model=none,multidevs=remap")

start=$(date +%s.%N)
set +e
timeout -k 10 "$timeout_s" "$qemu" "${args[@]}" </dev/null 2>"$rundir/qemu.err" &
qpid=$!
wait "$qpid"
qrc=$?
set -e
qpid=''
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

# Let the readers drain what QEMU wrote; they get EOF when it exits. A reader still
# blocked in open() (QEMU failed before opening its fifo) is released by a dummy
# writer. Bounded: a reader stuck on a blocked stdout is killed after 60 s.
release_reader() {  # $1 = pid, $2 = fifo
  [ -n "$1" ] || return 0
  if kill -0 "$1" 2>/dev/null && [ -p "$2" ]; then
    # shellcheck disable=SC2016  # $1 is the inner shell's
    timeout 2 bash -c ': >"$1"' _ "$2" 2>/dev/null || true
  fi
  for _ in $(seq 600); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
release_reader "$outpid" "$rundir/out.fifo"
release_reader "$conpid" "$rundir/console.fifo"
outpid='' conpid=''
[ "$verbose" = 1 ] && echo "run.sh: VM ran ${elapsed} s (boot to power-off), qemu exit status $qrc" >&2

if [ -f "$rundir/rc" ]; then
  rc=$(cat "$rundir/rc")
  [[ "$rc" =~ ^[0-9]+$ ]] || vm_fail "the guest reported a malformed exit code '$rc'"
  exit "$rc"
fi
show_logs() {
  if [ -s "$rundir/qemu.err" ]; then echo "--- qemu stderr:" >&2; tail -n 20 "$rundir/qemu.err" >&2; fi
  if [ -s "$rundir/console.log" ] && [ "$verbose" != 1 ]; then
    echo "--- guest console (last 30 lines):" >&2; tail -n 30 "$rundir/console.log" >&2
  fi
}
if [ -f "$rundir/vm_error" ]; then
  echo "run.sh: VM failure: guest setup failed: $(cat "$rundir/vm_error")" >&2
  show_logs
  exit 125
fi
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "run.sh: timed out after ${timeout_s} s: the guest never reported an exit code (VM killed)" >&2
  show_logs
  exit 124
fi
echo "run.sh: VM failure: QEMU exited with status $qrc after ${elapsed} s without the guest reporting an exit code" >&2
show_logs
exit 125
