#!/bin/busybox sh
# shellcheck shell=dash
# /init of the chorus Soft-RoCE VM (stage 1, runs from the initramfs under busybox).
# Loads the modules, mounts the host's / read-only over 9p with a tmpfs overlay on top,
# mounts the per-run folder (tag chorusrun) and the optional --out folder (tag chorusout),
# then runs the per-run stage 2 script inside a chroot of that root and powers off.
# Errors go to the kernel console and to <run folder>/vm_error for run.sh.
# No set -e: /init must reach halt_vm (or fail, which halts too), or the VM hangs.
/bin/busybox mkdir -p /bin /proc /sys /dev /mnt
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

NEW=/mnt/root
RUN=/mnt/run
run_mounted=0

halt_vm() {
  sync
  poweroff -f
  sleep 10
  echo o >/proc/sysrq-trigger
}
fail() {
  echo "chorus-rdma-vm init: $*" >/dev/console
  if [ "$run_mounted" = 1 ]; then
    echo "$*" >"$RUN/vm_error"
  elif [ -d "$NEW/run/chorus-rdma-vm" ]; then
    echo "$*" >"$NEW/run/chorus-rdma-vm/vm_error"
  fi
  halt_vm
}

while read -r m; do
  insmod "/lib/modules/$m" || fail "insmod $m failed"
done </modules.order

have_tag() {
  for f in /sys/bus/virtio/devices/*/mount_tag; do
    [ -f "$f" ] || continue
    [ "$(tr -d '\000\n' <"$f")" = "$1" ] && return 0
  done
  return 1
}
# virtio probing is asynchronous: wait (bounded) for the 9p tags.
i=0
until have_tag hostroot && have_tag chorusrun; do
  i=$((i + 1))
  [ $i -le 400 ] || fail "9p tags hostroot/chorusrun did not appear within 20 s"
  sleep 0.05
done

P9=trans=virtio,version=9p2000.L,msize=512000
mkdir -p "$RUN" /mnt/lower /mnt/rw "$NEW"
mount -t 9p -o "$P9" chorusrun "$RUN" || fail "mounting the run folder (9p tag chorusrun) failed"
run_mounted=1
mount -t 9p -o "$P9,ro,cache=loose" hostroot /mnt/lower || fail "mounting the host root (9p tag hostroot) failed"
mount -t tmpfs -o mode=755 rootrw /mnt/rw || fail "tmpfs for the overlay failed"
mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work overlay "$NEW" ||
  fail "overlay of the host root failed"

cwd=
[ -s "$RUN/cwd" ] && read -r cwd <"$RUN/cwd"
# A caller's working folder under /tmp would vanish under the fresh /tmp: keep it visible.
hold_cwd=0
case "$cwd" in
  /tmp/*)
    if [ -d "$NEW$cwd" ]; then
      mkdir -p /mnt/cwdhold && mount --bind "$NEW$cwd" /mnt/cwdhold && hold_cwd=1
    fi ;;
esac

mount -t proc proc "$NEW/proc" || fail "mounting /proc in the new root failed"
mount -t sysfs sysfs "$NEW/sys" || fail "mounting /sys in the new root failed"
mount -t devtmpfs devtmpfs "$NEW/dev" || fail "mounting /dev in the new root failed"
mkdir -p "$NEW/dev/pts" "$NEW/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$NEW/dev/pts" || fail "mounting /dev/pts failed"
mount -t tmpfs -o mode=1777 shm "$NEW/dev/shm" || fail "mounting /dev/shm failed"
mount -t tmpfs -o mode=1777 tmp "$NEW/tmp" || fail "mounting tmpfs on /tmp failed"
mount -t tmpfs -o mode=755 run "$NEW/run" || fail "mounting tmpfs on /run failed"
if [ "$hold_cwd" = 1 ]; then
  mkdir -p "$NEW$cwd" && mount --move /mnt/cwdhold "$NEW$cwd" || fail "re-mounting the working folder $cwd failed"
fi
mkdir -p "$NEW/run/chorus-rdma-vm"
mount --move "$RUN" "$NEW/run/chorus-rdma-vm" || fail "moving the run folder into the new root failed"
RUN="$NEW/run/chorus-rdma-vm"

if [ -s "$RUN/out_dir" ]; then
  read -r out <"$RUN/out_dir"
  i=0
  until have_tag chorusout; do
    i=$((i + 1))
    [ $i -le 200 ] || fail "9p tag chorusout (--out $out) did not appear"
    sleep 0.05
  done
  mkdir -p "$NEW$out" && mount -t 9p -o "$P9" chorusout "$NEW$out" || fail "mounting --out $out failed"
fi

[ -x "$NEW/bin/bash" ] || fail "/bin/bash missing in the host root"
chroot "$NEW" /bin/bash /run/chorus-rdma-vm/stage2.sh
halt_vm
