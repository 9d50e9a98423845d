#!/usr/bin/env bash
# The fault-injection suite: runs small jobs of fault_rank processes (loopback; the link
# cut in two network namespaces), injects one fault per run and sorts each run into
#   clean  every rank that had to fail exited 1 with an error naming the fault, or the
#          job that had to survive finished right;
#   hang   a rank was still there at the bound (then killed);
#   crash  a rank ended by a signal the suite did not send, or with another exit code;
#   other  it ended, but not as it should (wrong text, wrong verdict).
# and prints, per fault, runs / clean / hangs / crashes / other and the worst time from
# the fault to the last rank's error.
#
#   tools/faults/run.sh [-n RUNS] [--only f1,f2] [--keep DIR] [--xml DIR]
# Faults: kill freeze freeze4tcp linkcut storekill stranger insider garbage idle worldsize
# duprank portinuse. Jobs run with CHORUS_SECRET set and a peer timeout of PEER_TIMEOUT_S.
# Builds //tools/faults:fault_rank first. Exit 0 when every run was clean. --xml DIR
# writes DIR/faults.xml, one JUnit case per fault (tools/test.sh counts them in CI).
set -uo pipefail  # no -e: a failing rank is what the suite expects and inspects
cd "$(dirname "$0")/../.." || exit 2

readonly PROG=faults/run.sh PEER_TIMEOUT_S=4 CONNECT_TIMEOUT_S=10
runs=10 only="" keep="" xml=""
all_faults="kill freeze freeze4tcp linkcut storekill stranger insider garbage idle worldsize duprank portinuse"
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs=${2:?-n needs a count}; shift 2 ;;
    --only) only=${2:?--only needs a list}; shift 2 ;;
    --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
    --xml) xml=${2:?--xml needs a directory}; shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "$PROG: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
faults=${only//,/ }
faults=${faults:-$all_faults}
for f in $faults; do
  [[ " $all_faults " == *" $f "* ]] || { echo "$PROG: unknown fault '$f' (one of: $all_faults)" >&2; exit 2; }
done

log=$(mktemp)
if ! bazel build //tools/faults:fault_rank >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "$PROG: build failed" >&2
  exit 1
fi
bin="$(bazel info bazel-bin 2>/dev/null)/tools/faults/fault_rank"
work=$(mktemp -d)
export CHORUS_NETNS_TAG="faults$$"
TWO_NODES=tools/netns/two_nodes.sh
netns_ok=0
if [[ " $faults " == *" linkcut "* ]] && "$TWO_NODES" check >/dev/null 2>&1; then netns_ok=1; fi

declare -a pids=() victims=()
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  ((netns_ok)) && "$TWO_NODES" down >/dev/null 2>&1
  if [[ -n "$keep" ]]; then mkdir -p "$keep" && cp -r "$work"/. "$keep"/; fi
  rm -rf "$work" "$log"
}
trap cleanup EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }

free_port() {
  local port _
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
  echo 29999
}

# start R WORLD [extra env...]: rank R of the job in run directory $dir.
start() {
  local r=$1 world=$2
  shift 2
  env MASTER_ADDR="${master:-127.0.0.1}" MASTER_PORT="$port" RANK="$r" WORLD_SIZE="$world" \
    CHORUS_SECRET="$secret" CHORUS_PEER_TIMEOUT="$PEER_TIMEOUT_S" \
    CHORUS_CONNECT_TIMEOUT="$CONNECT_TIMEOUT_S" CHORUS_HOSTID="faults-host" "$@" \
    "$bin" --iters "$iters" >"$dir/out.${#pids[@]}" 2>"$dir/err.${#pids[@]}" &
  pids+=($!)
}

# start_in_node K R WORLD: as start, inside namespace node K (for the link cut).
start_in_node() {
  local k=$1 r=$2 world=$3
  "$TWO_NODES" exec "$k" env MASTER_ADDR=10.77.0.1 MASTER_PORT="$port" RANK="$r" WORLD_SIZE="$world" \
    CHORUS_SOCKET_IFNAME=chorus0 CHORUS_SECRET="$secret" CHORUS_PEER_TIMEOUT="$PEER_TIMEOUT_S" \
    CHORUS_CONNECT_TIMEOUT="$CONNECT_TIMEOUT_S" "$bin" --iters "$iters" \
    >"$dir/out.${#pids[@]}" 2>"$dir/err.${#pids[@]}" &
  pids+=($!)
}

# Waits (bounded) until process slot i says it is running.
await_running() {
  local i=$1 _
  for _ in $(seq 300); do
    grep -q running "$dir/out.$i" 2>/dev/null && return 0
    kill -0 "${pids[$i]}" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Ports process slot i listens on.
ports_of() { ss -Hltnp 2>/dev/null | awk -v pid="pid=$1," '$0 ~ pid { n = split($4, a, ":"); print a[n] }'; }

# Waits until slot i listens on at least n ports (the store and its data port: set-up
# reached the all-gather).
await_ports() {
  local i=$1 n=$2 _
  for _ in $(seq 200); do
    [ "$(ports_of "${pids[$i]}" | wc -l)" -ge "$n" ] && return 0
    sleep 0.05
  done
  return 1
}

# A stranger who knows the protocols but not the secret: reads and forges store keys,
# says Hello as rank 1 on every data port, and leaves connections idle.
stranger() {
  python3 - "$port" "$@" <<'EOF' 2>>"$dir/stranger.log"
import socket, struct, sys, time
store_port, data_ports = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
def s_str(b): return struct.pack('<I', len(b)) + b
def frame(op, payload): return struct.pack('<IBB', len(payload) + 2, 1, op) + payload
keep = []
try:
    s = socket.create_connection(('127.0.0.1', store_port), timeout=2)
    s.sendall(frame(1, s_str(b'chorus/comm0/peers/1') + s_str(b'chorus-peer 1\nrank=1\ntcp=127.0.0.1:9\n')))
    s.sendall(frame(1, s_str(b'chorus/job/size') + s_str(b'7 0 forged')))
    s.sendall(frame(2, s_str(b'chorus/comm0/id') + struct.pack('<q', 0)))
    keep.append(s)
except OSError as e:
    print('store:', e, file=sys.stderr)
for p in data_ports:
    try:
        d = socket.create_connection(('127.0.0.1', p), timeout=2)
        d.sendall(struct.pack('<IHHQiiiiii', 0x43485348, 2, 0, 0, 1, 0, 2, 0, 1, 0))
        keep.append(d)
    except OSError as e:
        print('data', p, e, file=sys.stderr)
time.sleep(1)
EOF
}

# Random bytes to every given port, and one connection per port left idle.
garbage() {
  python3 - "$@" <<'EOF' 2>>"$dir/stranger.log"
import os, socket, sys, time
keep = []
for p in sys.argv[1:]:
    for n in (1, 64, 4096, 70000):
        try:
            c = socket.create_connection(('127.0.0.1', int(p)), timeout=2)
            c.sendall(os.urandom(n))
            c.close()
        except OSError as e:
            print('garbage', p, e, file=sys.stderr)
    try:
        keep.append(socket.create_connection(('127.0.0.1', int(p)), timeout=2))
    except OSError as e:
        print('idle', p, e, file=sys.stderr)
time.sleep(1)
EOF
}

# One run of fault $1. Prints "verdict ms" (ms: from the fault to the last rank's end).
run_one() {
  local fault=$1 want_code=1 pattern="" t0 bound=$((PEER_TIMEOUT_S + CONNECT_TIMEOUT_S + 20)) i
  pids=() victims=()
  port=$(free_port) master=127.0.0.1 secret="s3cret-$RANDOM$RANDOM" iters=1000000
  case "$fault" in
    kill | freeze | storekill)
      start 0 3 && start 1 3 && start 2 3
      for i in 0 1 2; do await_running "$i" || { echo "other 0"; return; }; done
      local v=1
      [ "$fault" = storekill ] && v=0
      victims=("$v")
      t0=$(now_ms)
      if [ "$fault" = freeze ]; then kill -STOP "${pids[$v]}"; else kill -KILL "${pids[$v]}"; fi
      pattern="rank $v"
      ;;
    freeze4tcp)
      # Four ranks over TCP, one stopped: its healthy neighbours answer PINGs, so every
      # survivor must name the stopped one, not a neighbour.
      for i in 0 1 2 3; do start "$i" 4 CHORUS_TRANSPORT=tcp; done
      for i in 0 1 2 3; do await_running "$i" || { echo "other 0"; return; }; done
      victims=(2)
      t0=$(now_ms)
      kill -STOP "${pids[2]}"
      pattern="rank 2"
      ;;
    linkcut)
      ((netns_ok)) || { echo "skipped 0"; return; }
      "$TWO_NODES" up 2 >/dev/null
      port=29500
      start_in_node 0 0 2 && start_in_node 1 1 2
      for i in 0 1; do await_running "$i" || { echo "other 0"; "$TWO_NODES" down >/dev/null; return; }; done
      t0=$(now_ms)
      ip netns exec "chorus_n1_${CHORUS_NETNS_TAG}" ip link set chorus0 down
      pattern="rank [01]"
      ;;
    stranger | garbage | idle)
      # Set-up under attack: rank 0 alone first, with its store and data port up.
      iters=200 want_code=0
      start 0 2
      await_ports 0 2 || { echo "other 0"; return; }
      t0=$(now_ms)
      # shellcheck disable=SC2046  # one port per word
      case "$fault" in
        stranger) stranger $(ports_of "${pids[0]}" | grep -vx "$port") ;;
        garbage) garbage $(ports_of "${pids[0]}") ;;
        idle) (exec 3<>"/dev/tcp/127.0.0.1/$port" 4<>"/dev/tcp/127.0.0.1/$(ports_of "${pids[0]}" | grep -vx "$port" | head -n1)" && sleep 3) 2>/dev/null & ;;
      esac
      start 1 2
      ;;
    insider)
      # Knows the secret and starts as rank 1 before the real one.
      start 0 3 && start 1 3
      await_ports 1 1
      t0=$(now_ms)
      start 1 3
      pattern="started twice"
      ;;
    worldsize)
      t0=$(now_ms)
      start 0 2 && start 1 3
      pattern="world size differs"
      ;;
    duprank)
      t0=$(now_ms)
      start 0 3 && start 1 3 && start 1 3
      pattern="started twice"
      ;;
    portinuse)
      # Someone else's server holds MASTER_PORT and never speaks.
      python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
conns=[]
end=time.time()+60
while time.time()<end:
    s.settimeout(1)
    try: conns.append(s.accept()[0])
    except OSError: pass' "$port" &
      local squatter=$! _
      for _ in $(seq 200); do
        ss -Hltn "sport = :$port" | grep -q . && break
        sleep 0.05
      done
      t0=$(now_ms)
      start 0 2 && start 1 2
      pattern="store|MASTER"
      ;;
  esac
  # Collect every rank but the victims, up to the bound.
  local deadline=$(($(now_ms) + bound * 1000)) last=$t0 verdict=clean code
  for i in "${!pids[@]}"; do
    [[ " ${victims[*]} " == *" $i "* ]] && continue
    while kill -0 "${pids[$i]}" 2>/dev/null && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.02; done
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      verdict=hang
      kill -KILL "${pids[$i]}" 2>/dev/null
    fi
    wait "${pids[$i]}"
    code=$?
    [ "$(now_ms)" -gt "$last" ] && last=$(now_ms)
    [ "$verdict" = hang ] && continue
    if ((code > 128)); then
      verdict=crash
    elif ((code != want_code)); then
      [ "$verdict" = clean ] && verdict=other
    elif [ -n "$pattern" ] && ! grep -Eq "$pattern" "$dir/err.$i"; then
      [ "$verdict" = clean ] && verdict=other
    fi
  done
  for i in "${victims[@]}"; do
    kill -KILL "${pids[$i]}" 2>/dev/null
    wait "${pids[$i]}" 2>/dev/null
  done
  [ -n "${squatter:-}" ] && { kill "$squatter" 2>/dev/null; wait "$squatter" 2>/dev/null; }
  [ "$fault" = linkcut ] && "$TWO_NODES" down >/dev/null
  pids=()
  echo "$verdict $((last - t0))"
}

printf "%-10s %5s %6s %6s %8s %6s %14s\n" fault runs clean hangs crashes other "worst(ms)"
status=0
for fault in $faults; do
  declare -A n=([clean]=0 [hang]=0 [crash]=0 [other]=0 [skipped]=0)
  worst=0
  for k in $(seq "$runs"); do
    dir="$work/$fault.$k"
    mkdir -p "$dir"
    read -r verdict ms < <(run_one "$fault")
    n[$verdict]=$((n[$verdict] + 1))
    echo "$verdict $ms" >"$dir/verdict"
    if [ "$verdict" = clean ] && [ "$ms" -gt "$worst" ]; then worst=$ms; fi
    # What each rank said, for a run that was not clean (CI keeps only this output).
    if [ "$verdict" != clean ] && [ "$verdict" != skipped ]; then
      for f in "$dir"/err.* "$dir"/out.*; do
        [ -s "$f" ] && { echo "faults: $fault run $k ($verdict): ${f##*/}:"; tail -n 5 "$f" | sed 's/^/  /'; }
      done >&2
    fi
  done
  if ((n[skipped] == runs)); then
    printf "%-10s %5s %s\n" "$fault" 0 "skipped: no network namespaces here (two_nodes.sh check)"
    echo "$fault skipped" >>"$work/summary"
    continue
  fi
  printf "%-10s %5d %6d %6d %8d %6d %14d\n" "$fault" "$runs" "${n[clean]}" "${n[hang]}" "${n[crash]}" "${n[other]}" "$worst"
  echo "$fault $runs ${n[clean]} ${n[hang]} ${n[crash]} ${n[other]} $worst" >>"$work/summary"
  ((n[clean] == runs)) || status=1
done
if [[ -n "$xml" ]]; then
  mkdir -p "$xml"
  python3 - "$xml/faults.xml" "$work/summary" <<'PY'
import sys
import xml.etree.ElementTree as ET
path, summary = sys.argv[1], sys.argv[2]
suite = ET.Element("testsuite", name="faults")
for line in open(summary):
    f = line.split()
    case = ET.SubElement(suite, "testcase", classname="faults", name=f[0])
    if f[1] == "skipped":
        ET.SubElement(case, "skipped", message="no network namespaces here")
    elif f[1] != f[2]:
        ET.SubElement(case, "failure", message="%s of %s runs clean (hangs %s, crashes %s, other %s)" %
                      (f[2], f[1], f[3], f[4], f[5]))
ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
PY
fi
exit $status
