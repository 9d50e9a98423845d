#!/usr/bin/env bash
# Installs the built tree with tools/install.sh under TEST_TMPDIR, checks its layout and
# that each installed header compiles on its own against the prefix alone, then builds
# the examples outside the workspace (g++ + pkg-config, CMake's find_package; shared
# and static) and runs them on 2 ranks with the installed chorusrun.
# Args: install.sh chorus.tar.gz examples/cpp/CMakeLists.txt
set -euo pipefail
install_sh=$(realpath "$1")
tarball=$(realpath "$2")
examples=$(dirname "$(realpath "$3")")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for tool in g++ pkg-config cmake readelf nm; do
  command -v "$tool" >/dev/null || fail "$tool not found (tools/bootstrap.sh installs it)"
done

T=${TEST_TMPDIR:?}
prefix="$T/prefix"
# Nothing of the workspace is reachable from here: only the prefix and the copied sources.
mkdir -p "$T/src" && cp "$examples"/*.cc "$examples"/*.h "$examples"/CMakeLists.txt "$T/src/"
cd "$T/src"

echo "--- install"
"$install_sh" --prefix "$prefix" --tarball "$tarball"
for f in lib/libchorus.so lib/libchorus.a lib/pkgconfig/chorus.pc lib/pkgconfig/chorus-static.pc \
  lib/cmake/chorus/chorusConfig.cmake lib/cmake/chorus/chorusConfigVersion.cmake \
  include/chorus/chorus/communicator.h include/chorus/chorus/work.h include/chorus/chorus/config.h \
  include/chorus/common/status.h include/chorus/common/types.h; do
  [ -f "$prefix/$f" ] || fail "$f is not installed"
done
[ -x "$prefix/bin/chorusrun" ] || fail "bin/chorusrun is not installed"
[ "$(ls "$prefix/include")" = chorus ] || fail "include/ holds more than chorus/: $(ls "$prefix/include")"
rc=0
"$install_sh" --tarball "$tarball" >/dev/null 2>"$T/err" || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q -- "--prefix DIR is required" "$T/err"; then
  fail "install.sh without --prefix: rc $rc, $(cat "$T/err")"
fi

echo "--- each installed header compiles alone, against the prefix only"
n=0
while IFS= read -r h; do
  rel=${h#"$prefix/include/chorus/"}
  printf '#include "%s"\n#include "%s"\n' "$rel" "$rel" |
    g++ -std=c++17 -Wall -Werror -fsyntax-only -I"$prefix/include/chorus" -x c++ - ||
    fail "installed header $rel does not compile on its own"
  n=$((n + 1))
done < <(find "$prefix/include" -name '*.h' | sort)
echo "$n headers"

echo "--- libchorus.so: chorus's API exported, the third-party archives inside it hidden"
needed=$(readelf -d "$prefix/lib/libchorus.so" | grep NEEDED || true)
[[ "$needed" != *liburing* && "$needed" != *libcudart* ]] || fail "libchorus.so needs a third-party library: $needed"
grep -q 'SONAME.*\[libchorus.so\]' <<<"$(readelf -d "$prefix/lib/libchorus.so")" || fail "libchorus.so has no SONAME libchorus.so"
exports=$(nm -D -C --defined-only "$prefix/lib/libchorus.so")
grep -q 'chorus::Communicator::Create(chorus::Options const&)' <<<"$exports" || fail "Communicator::Create is not exported"
# C functions of liburing and CUDA's runtime (unmangled names).
if nm -D --defined-only "$prefix/lib/libchorus.so" | grep -E ' [A-Za-z] (io_uring_|cuda[A-Z])'; then
  fail "third-party symbols are exported (above)"
fi
archive_symbols=$(nm -C --defined-only "$prefix/lib/libchorus.a" 2>/dev/null)
grep -q 'chorus::Communicator::Create' <<<"$archive_symbols" || fail "libchorus.a does not define Communicator::Create"

# A chorus built with sanitizers (bazel test --config=asan|tsan) needs programs built
# with the same ones: take them from the symbols libchorus.a leaves to the runtime.
sanitizers=()
undefined=$(nm -u "$prefix/lib/libchorus.a" 2>/dev/null)
grep -q ' __asan_' <<<"$undefined" && sanitizers+=(address)
grep -q ' __ubsan_' <<<"$undefined" && sanitizers+=(undefined)
grep -q ' __tsan_' <<<"$undefined" && sanitizers+=(thread)
san_flags=""
if [ ${#sanitizers[@]} -gt 0 ]; then
  san_flags="-fsanitize=$(IFS=,; echo "${sanitizers[*]}")"
  echo "--- chorus was built with $san_flags: so are the programs below"
fi

# run NAME BINARY: the binary on 2 ranks through the installed launcher, every rank ok.
run() {
  local out line rc=0
  out=$(timeout -s KILL 150 "$prefix/bin/chorusrun" --nproc-per-node 2 --timeout 120 -- "$2" 2>&1) || rc=$?
  while IFS= read -r line; do echo "    $line"; done <<<"$out"
  [ "$rc" -eq 0 ] || fail "$2 exited with $rc"
  for r in 0 1; do
    grep -qF "[rank $r] rank $r: $1 ok" <<<"$out" || fail "$2: rank $r did not report '$1 ok'"
  done
}
# links_shared BINARY: whether it loads libchorus.so at run time.
links_shared() { grep -q 'NEEDED.*\[libchorus.so\]' <<<"$(readelf -d "$1")"; }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
echo "--- pkg-config: $(pkg-config --cflags --libs chorus)"
[ "$(pkg-config --modversion chorus)" = "$(pkg-config --modversion chorus-static)" ] || fail "versions differ"
static_libs=$(pkg-config --static --libs chorus)
[[ "$static_libs" == *-lchorus* && "$static_libs" == *-ldl* ]] || fail "pkg-config --static --libs chorus: $static_libs"
# shellcheck disable=SC2046,SC2086  # pkg-config's output and $san_flags are split on purpose
g++ -std=c++17 -Wall -O1 $san_flags collectives.cc -o collectives_pc_shared $(pkg-config --cflags --libs chorus)
links_shared collectives_pc_shared || fail "the pkg-config shared build does not load libchorus.so"
run collectives ./collectives_pc_shared
echo "--- pkg-config static: $(pkg-config --libs chorus-static)"
# shellcheck disable=SC2046,SC2086
g++ -std=c++17 -Wall -O1 $san_flags collectives.cc -o collectives_pc_static $(pkg-config --cflags --libs chorus-static)
if links_shared collectives_pc_static; then fail "the static build loads libchorus.so"; fi
run collectives ./collectives_pc_static

for kind in shared static; do
  echo "--- CMake, find_package(chorus), $kind"
  static=OFF
  [ "$kind" = static ] && static=ON
  cmake -S . -B "build_$kind" -DCMAKE_PREFIX_PATH="$prefix" -DCHORUS_STATIC=$static \
    -DCMAKE_CXX_FLAGS="$san_flags" -DCMAKE_EXE_LINKER_FLAGS="$san_flags" \
    >"$T/cmake_$kind.log" 2>&1 || { cat "$T/cmake_$kind.log"; fail "cmake ($kind) failed to configure"; }
  cmake --build "build_$kind" -j 2 >>"$T/cmake_$kind.log" 2>&1 || { cat "$T/cmake_$kind.log"; fail "cmake ($kind) build failed"; }
  for example in send_recv isend_irecv ring_allreduce collectives train_step; do
    if links_shared "build_$kind/$example"; then
      [ "$kind" = shared ] || fail "the static $example loads libchorus.so"
    else
      [ "$kind" = static ] || fail "the shared $example does not load libchorus.so"
    fi
    run "$example" "build_$kind/$example"
  done
done

echo "--- the bare tarball is relocatable: pkg-config and CMake find it where it was unpacked"
mkdir -p "$T/moved" && tar -xzf "$tarball" -C "$T/moved"
[ "$(PKG_CONFIG_PATH="$T/moved/lib/pkgconfig" pkg-config --variable=libdir chorus)" -ef "$T/moved/lib" ] ||
  fail "the unpacked chorus.pc does not point at its own tree"
mkdir -p "$T/find" && cat >"$T/find/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(find LANGUAGES CXX)
find_package(chorus ${WANT} REQUIRED)
get_target_property(location chorus::chorus IMPORTED_LOCATION)
message(STATUS "chorus at ${location}")
EOF
cmake -S "$T/find" -B "$T/find/build" -DCMAKE_PREFIX_PATH="$T/moved" -DWANT=0.1 >"$T/find.log" 2>&1 ||
  { cat "$T/find.log"; fail "find_package on the unpacked tarball failed"; }
grep -qF "chorus at $T/moved/lib/libchorus.so" "$T/find.log" || fail "find_package found another tree: $(cat "$T/find.log")"
echo "--- find_package(chorus 1.0) refuses version $(pkg-config --modversion chorus)"
if cmake -S "$T/find" -B "$T/find/build1" -DCMAKE_PREFIX_PATH="$T/moved" -DWANT=1.0 >"$T/find1.log" 2>&1; then
  fail "find_package(chorus 1.0) accepted $(pkg-config --modversion chorus)"
fi
grep -q "not compatible\|not found\|version" "$T/find1.log" || fail "no version message: $(cat "$T/find1.log")"
echo "PASS"
