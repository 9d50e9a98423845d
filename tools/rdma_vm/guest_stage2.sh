#!/bin/bash
# Stage 2 of the chorus Soft-RoCE VM: runs as root inside the chroot of the host root
# (see guest_init.sh). Brings up lo and a dummy netdev with rxe0 on top, then runs the
# caller's command with its output on the virtio serial port named chorus.out (the
# caller's stdout; a serial port or hvc console moves ~150 KB/s under TCG, this one
# MB/s) and writes the exit code to /run/chorus-rdma-vm/rc for run.sh.
set -u  # no -e: the exit code is written for run.sh, never lost
RUN=/run/chorus-rdma-vm
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

fail() {
  printf '%s\n' "$*" >"$RUN/vm_error"
  echo "chorus-rdma-vm stage2: $*" >/dev/console
  exit 1
}
# shellcheck disable=SC1091
. "$RUN/cmd.env" || fail "cannot read $RUN/cmd.env"
netdev=rdmavm0
addr=${CMD_ADDR:-10.77.0.1/24}

ip link set lo up || fail "ip link set lo up failed"
ip link add "$netdev" type dummy || fail "ip link add $netdev type dummy failed"
ip addr add "$addr" dev "$netdev" || fail "ip addr add $addr dev $netdev failed"
ip link set "$netdev" up || fail "ip link set $netdev up failed"
rdma link add rxe0 type rxe netdev "$netdev" || fail "rdma link add rxe0 type rxe netdev $netdev failed"
port=/sys/class/infiniband/rxe0/ports/1
zero_gid=0000:0000:0000:0000:0000:0000:0000:0000
for ((i = 0; ; i++)); do
  state=$(cat "$port/state" 2>/dev/null || true)
  gid1=$(cat "$port/gids/1" 2>/dev/null || true)
  [[ "$state" == *ACTIVE* && -n "$gid1" && "$gid1" != "$zero_gid" ]] && break
  ((i < 200)) || fail "rxe0 port 1 not ACTIVE with an IPv4 GID at index 1 after 10 s (state '$state', gid1 '$gid1')"
  sleep 0.05
done

# Not a tty: no line discipline to configure. A blocking write returns once QEMU has
# taken the data, so nothing is lost at power-off.
out=
for ((i = 0; ; i++)); do
  for n in /sys/class/virtio-ports/*/name; do
    [ -r "$n" ] && [ "$(<"$n")" = chorus.out ] || continue
    p=${n%/name}
    [ -c "/dev/${p##*/}" ] && out=/dev/${p##*/}
  done
  [ -n "$out" ] && break
  ((i < 200)) || fail "virtio serial port chorus.out did not appear within 10 s"
  sleep 0.05
done
cd "$CMD_CWD" 2>/dev/null || fail "the working folder $CMD_CWD is not visible in the guest"

# The command writes into a pipe (as under CI), drained by cat onto the console.
# Only the command itself is waited for: background children it leaves holding the
# pipe get 2 s to finish writing before the drain stops.
fifo=/run/chorus-rdma-vm-out.fifo
mkfifo "$fifo" || fail "mkfifo $fifo failed"
cat "$fifo" >"$out" &
catpid=$!
env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash PATH="$PATH" LANG=C.UTF-8 TERM=dumb \
  "${CMD_ENV[@]}" "${CMD_ARGV[@]}" </dev/null >"$fifo" 2>&1 &
cmdpid=$!
wait "$cmdpid"
rc=$?
for ((i = 0; i < 40; i++)); do
  kill -0 "$catpid" 2>/dev/null || break
  sleep 0.05
done
kill "$catpid" 2>/dev/null
wait "$catpid" 2>/dev/null
echo "$rc" >"$RUN/rc.tmp" && mv -f "$RUN/rc.tmp" "$RUN/rc" || fail "cannot write the exit code to $RUN/rc"
sync
exit 0
