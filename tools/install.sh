#!/usr/bin/env bash
# Installs chorus for C++ programs outside this workspace: builds the install tree
# (bazel build -c opt //dist:chorus) and unpacks it under a prefix:
#
#   PREFIX/lib/libchorus.so, PREFIX/lib/libchorus.a  (chorus and what it links)
#   PREFIX/include/chorus/{chorus,common}/*.h        (-I PREFIX/include/chorus)
#   PREFIX/lib/pkgconfig/chorus.pc, chorus-static.pc
#   PREFIX/lib/cmake/chorus/chorusConfig.cmake       (chorus::chorus, chorus::chorus_static)
#   PREFIX/bin/chorusrun                             (starts the ranks of a job)
#
#   tools/install.sh --prefix DIR [--tarball FILE]
# --tarball installs an already built bazel-bin/dist/chorus.tar.gz instead of building.
set -euo pipefail

prefix="" tarball=""
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix | --tarball)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "install.sh: $1 needs a value" >&2; exit 2; fi
      case "$1" in --prefix) prefix=$2 ;; --tarball) tarball=$2 ;; esac
      shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --tarball=*) tarball=${1#--tarball=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$prefix" ] || { echo "install.sh: --prefix DIR is required (see --help)" >&2; exit 2; }

if [ -z "$tarball" ]; then
  cd "$(dirname "$0")/.."
  command -v bazel >/dev/null || { echo "install.sh: bazel not found; run tools/bootstrap.sh first" >&2; exit 1; }
  echo "install.sh: building the install tree: bazel build -c opt //dist:chorus" >&2
  bazel build -c opt //dist:chorus
  tarball="$(bazel info -c opt bazel-bin 2>/dev/null)/dist/chorus.tar.gz"
fi
[ -f "$tarball" ] || { echo "install.sh: no such tarball: $tarball" >&2; exit 1; }

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
# Existing folders (PREFIX/lib, ...) keep their owner, mode and time.
tar -xzf "$tarball" -C "$prefix" --no-same-owner --no-overwrite-dir --touch
# The tarball's .pc files find the prefix from their own place (${pcfiledir}); once
# installed, name it plainly so that pkg-config prints clean paths.
for pc in "$prefix"/lib/pkgconfig/chorus.pc "$prefix"/lib/pkgconfig/chorus-static.pc; do
  PREFIX=$prefix awk '/^prefix=/ { print "prefix=" ENVIRON["PREFIX"]; next } { print }' "$pc" >"$pc.new"
  mv "$pc.new" "$pc"
done

cat <<EOF
install.sh: chorus installed under $prefix
  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig g++ -std=c++17 prog.cc \$(pkg-config --cflags --libs chorus)
              (static: pkg-config --cflags --libs chorus-static)
  CMake:      find_package(chorus REQUIRED) with -DCMAKE_PREFIX_PATH=$prefix;
              target_link_libraries(prog PRIVATE chorus::chorus)   # or chorus::chorus_static
  run:        $prefix/bin/chorusrun --nproc-per-node 2 -- ./prog
EOF
