#!/usr/bin/env bash
# Prepares the Soft-RoCE VM used by run.sh: host packages, a Debian 6.1 guest kernel
# (downloaded, never installed) and a busybox initramfs with the RDMA/9p modules.
# Everything lands in ${CHORUS_RDMA_VM_CACHE:-/var/cache/chorus-rdma-vm}; a second run is a no-op.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: tools/rdma_vm/prepare.sh [--refresh-kernel] [--print-env]
  Installs host packages (apt), fetches the newest Debian linux-image-6.1.0-*-amd64,
  builds the initramfs. Cache: ${CHORUS_RDMA_VM_CACHE:-/var/cache/chorus-rdma-vm}.
  --refresh-kernel  ask apt again for the newest 6.1 kernel (default: keep the cached one)
  --print-env       on success, print the cache's vm.env (KVER=, KERNEL=, INITRD=)
USAGE
}

refresh_kernel=0
print_env=0
while [ $# -gt 0 ]; do
  case "$1" in
    --refresh-kernel) refresh_kernel=1 ;;
    --print-env) print_env=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "prepare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${CHORUS_RDMA_VM_CACHE:-/var/cache/chorus-rdma-vm}
init_src="$here/guest_init.sh"

# Host packages the VM needs (qemu, busybox for the initramfs, the verbs stack and
# perftest that run in the guest from the shared host root, kmod for depmod/modprobe).
packages=(qemu-system-x86 busybox-static rdma-core ibverbs-utils ibverbs-providers perftest
          kmod cpio iproute2 gzip xz-utils zstd)
# Top-level modules; their dependencies are resolved with modprobe --show-depends.
modules=(virtio_pci virtio_console 9pnet_virtio 9p overlay dummy crc32_generic rdma_rxe ib_uverbs rdma_ucm ib_umad)

die() { echo "prepare.sh: error: $*" >&2; exit 1; }
trap 'echo "prepare.sh: error: unexpected failure at line $LINENO: $BASH_COMMAND" >&2' ERR

missing_packages() {  # one dpkg-query call: the no-op path must stay fast
  local installed
  installed=$(dpkg-query -W -f '${Package} ${Status}\n' "${packages[@]}" 2>/dev/null |
              awk '$2 == "install" && $3 == "ok" && $4 == "installed" { print $1 }' || true)
  for p in "${packages[@]}"; do
    grep -qxF "$p" <<<"$installed" || echo "$p"
  done
}

# The stamp names everything the initramfs is built from; a change rebuilds it.
stamp_of() {  # $1 = kernel package file name
  { echo "v2 $1 ${modules[*]}"; sha256sum <"$init_src"; } | sha256sum | cut -d' ' -f1
}

[ -f "$init_src" ] || die "missing $init_src (the guest's /init)"

fast_ok() {
  [ -f "$cache/vm.env" ] || return 1
  [ -z "$(missing_packages)" ] || return 1
  local KERNEL='' INITRD='' KPKG='' STAMP=''
  # shellcheck disable=SC1091
  . "$cache/vm.env"
  [ -f "$KERNEL" ] && [ -f "$INITRD" ] && [ "$STAMP" = "$(stamp_of "$KPKG")" ]
}

if [ "$refresh_kernel" = 0 ] && fast_ok; then
  [ "$print_env" = 1 ] && cat "$cache/vm.env"
  exit 0
fi

# ---- slow path: needs root (apt, /var/cache) ------------------------------------
[ "$(id -u)" = 0 ] || die "the VM is not prepared yet (no valid $cache/vm.env) and preparing needs root (apt-get install, writing $cache); run: sudo $0"
command -v apt-get >/dev/null || die "apt-get not found: this script needs a Debian/Ubuntu host"
mkdir -p "$cache" || die "cannot create cache folder $cache"
command -v flock >/dev/null || die "flock (util-linux) not found"
exec 9>"$cache/.lock"
flock -w 900 9 || die "another prepare.sh held $cache/.lock for 15 minutes; giving up"
# Another run may have finished the work while we waited for the lock.
if [ "$refresh_kernel" = 0 ] && fast_ok; then
  [ "$print_env" = 1 ] && cat "$cache/vm.env"
  exit 0
fi

log="$cache/prepare.log"
: >"$log"
export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_update() {
  [ "$apt_updated" = 1 ] && return 0
  apt_updated=1
  timeout 300 apt-get -q update >>"$log" 2>&1 ||
    die "'apt-get update' failed (no network or broken apt sources?); see $log:
$(tail -n 5 "$log")"
}

mapfile -t need < <(missing_packages)
if [ ${#need[@]} -gt 0 ]; then
  echo "prepare.sh: installing ${need[*]}" >&2
  if ! timeout 900 apt-get -q -y --no-install-recommends install "${need[@]}" >>"$log" 2>&1; then
    apt_update
    timeout 900 apt-get -q -y --no-install-recommends install "${need[@]}" >>"$log" 2>&1 ||
      die "'apt-get install ${need[*]}' failed (no network or package unavailable?); see $log:
$(tail -n 5 "$log")"
  fi
  mapfile -t still < <(missing_packages)
  [ ${#still[@]} -eq 0 ] || die "packages still not installed after apt-get: ${still[*]}"
fi
[ -x /bin/busybox ] || die "/bin/busybox missing although busybox-static is installed"
# The initramfs has no libc: busybox must be the static build.
if ldd /bin/busybox >/dev/null 2>&1; then
  die "/bin/busybox is dynamically linked; install busybox-static (it replaces busybox)"
fi

# ---- guest kernel -----------------------------------------------------------------
newest_kernel_pkg() {
  local dep
  dep=$(apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-6\.1\.0-[0-9]*-amd64\)$/\1/p' | head -n 1)
  if [ -n "$dep" ]; then echo "$dep"; return; fi
  apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
    cut -d' ' -f1 | sort -V | tail -n 1
}

kdeb=
if [ "$refresh_kernel" = 0 ]; then
  if [ -d "$cache/kernel" ]; then
    kdeb=$(find "$cache/kernel" -maxdepth 1 -name 'linux-image-6.1.0-*-amd64_*.deb' | sort -V | tail -n 1)
  fi
fi
if [ -z "$kdeb" ]; then
  pkg=$(newest_kernel_pkg)
  if [ -z "$pkg" ]; then
    apt_update
    pkg=$(newest_kernel_pkg)
  fi
  [ -n "$pkg" ] || die "apt knows no linux-image-6.1.0-*-amd64 package (is this Debian 12 with bookworm sources?)"
  mkdir -p "$cache/kernel"
  dl=$(mktemp -d "$cache/kernel/dl.XXXXXX")
  echo "prepare.sh: downloading $pkg" >&2
  if ! (cd "$dl" && timeout 600 apt-get -q -o APT::Sandbox::User=root download "$pkg") >>"$log" 2>&1; then
    apt_update
    (cd "$dl" && timeout 600 apt-get -q -o APT::Sandbox::User=root download "$pkg") >>"$log" 2>&1 ||
      { rm -rf "$dl"; die "'apt-get download $pkg' failed (no network?); see $log:
$(tail -n 5 "$log")"; }
  fi
  f=$(find "$dl" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
  [ -n "$f" ] || { rm -rf "$dl"; die "apt-get download $pkg produced no .deb"; }
  mv "$f" "$cache/kernel/"
  kdeb="$cache/kernel/$(basename "$f")"
  rm -rf "$dl"
fi
kpkg=$(basename "$kdeb" .deb)
kroot="$cache/kernel/$kpkg"
if [ ! -f "$kroot/.unpacked" ]; then
  rm -rf "$kroot"
  mkdir -p "$kroot"
  dpkg -x "$kdeb" "$kroot" || die "dpkg -x $kdeb failed"
  touch "$kroot/.unpacked"
fi
kver=$(find "$kroot/lib/modules" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | head -n 1)
[ -n "$kver" ] || die "no lib/modules/<version> in $kdeb"
vmlinuz="$kroot/boot/vmlinuz-$kver"
[ -f "$vmlinuz" ] || die "no boot/vmlinuz-$kver in $kdeb"
[ -f "$kroot/lib/modules/$kver/modules.dep.bin" ] || depmod -b "$kroot" "$kver" ||
  die "depmod -b $kroot $kver failed"

# Boot speed: under TCG, decompressing the bzImage costs ~1.5 s per boot. QEMU can boot
# the uncompressed ELF vmlinux directly through its PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY,
# type 0x12), so extract it once when the payload is xz/zstd and the note is there;
# otherwise keep booting vmlinuz.
boot_kernel=$vmlinuz
vmlinux="$kroot/boot/vmlinux-$kver.pvh"
if [ ! -f "$vmlinux" ] && command -v readelf >/dev/null; then
  for fmt in xz zstd; do
    case $fmt in
      xz) magic='\xFD7zXZ\x00'; dec=(xz -dc) ;;
      zstd) magic='\x28\xB5\x2F\xFD'; dec=(zstd -q -dc) ;;
    esac
    off=$(LC_ALL=C grep -obUaP "$magic" "$vmlinuz" 2>/dev/null | head -n 1 | cut -d: -f1 || true)
    [ -n "$off" ] || continue
    # The decompressor stops at the payload's end; trailing bytes make it exit != 0.
    tail -c +"$((off + 1))" "$vmlinuz" | "${dec[@]}" >"$vmlinux.tmp" 2>/dev/null || true
    if readelf -n "$vmlinux.tmp" 2>/dev/null | grep -qE '0x00000012|PHYS32_ENTRY'; then
      mv -f "$vmlinux.tmp" "$vmlinux"
      break
    fi
    rm -f "$vmlinux.tmp"
  done
fi
[ -f "$vmlinux" ] && boot_kernel=$vmlinux

# ---- initramfs --------------------------------------------------------------------
work=$(mktemp -d "$cache/initramfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,mnt,lib/modules}
cp /bin/busybox "$work/bin/busybox"
cp "$init_src" "$work/init"
chmod 755 "$work/init" "$work/bin/busybox"

# Resolve the load order; keep the first occurrence of each module.
declare -A seen=()
order=()
for m in "${modules[@]}"; do
  deps=$(modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>>"$log") ||
    die "modprobe --show-depends $m failed for kernel $kver; see $log"
  while read -r kind path _; do
    [ "$kind" = insmod ] || continue
    [ -n "${seen[$path]:-}" ] && continue
    seen[$path]=1
    order+=("$path")
  done <<<"$deps"
done
: >"$work/modules.order"
for path in "${order[@]}"; do
  src="$kroot${path#"$kroot"}"
  name=$(basename "$path"); name=${name%.xz}; name=${name%.zst}; name=${name%.gz}
  case "$path" in
    *.ko.xz) xz -dc "$src" >"$work/lib/modules/$name" ;;
    *.ko.zst) zstd -q -dc "$src" >"$work/lib/modules/$name" ;;
    *.ko.gz) gzip -dc "$src" >"$work/lib/modules/$name" ;;
    *.ko) cp "$src" "$work/lib/modules/$name" ;;
    *) die "unexpected module file $path" ;;
  esac
  echo "$name" >>"$work/modules.order"
done
[ -s "$work/modules.order" ] || die "no modules resolved for kernel $kver"

initrd="$cache/initramfs-$kver.cpio.gz"
(cd "$work" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp" ||
  die "building the initramfs failed"
mv -f "$initrd.tmp" "$initrd"

printf '%s=%q\n' KVER "$kver" KERNEL "$boot_kernel" INITRD "$initrd" KPKG "$kpkg" \
  STAMP "$(stamp_of "$kpkg")" >"$cache/vm.env.tmp"
mv -f "$cache/vm.env.tmp" "$cache/vm.env"
echo "prepare.sh: ready: kernel $kver, $(wc -l <"$work/modules.order") modules, cache $cache" >&2
[ "$print_env" = 1 ] && cat "$cache/vm.env"
exit 0
