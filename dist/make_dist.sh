#!/usr/bin/env bash
# The packager behind cc_dist (dist/dist.bzl): lays out the install tree in a staging
# folder and writes it as a tarball whose bytes depend only on its inputs.
#
#   lib/lib<name>.so, lib/lib<name>.a (every archive of the link closure merged),
#   include/<name>/... (public headers + what they include), bin/...,
#   lib/pkgconfig/<name>.pc and <name>-static.pc, lib/cmake/<name>/<name>Config*.cmake
set -euo pipefail

die() {
  echo "make_dist: $*" >&2
  exit 1
}

out="" name="" version="" description="" cc="" ar="" inputs="" flags="" headers="" shared=""
pc_t="" pc_static_t="" cmake_t="" cmake_version_t=""
bins=() public=()
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --out) out=$2 ;;
    --name) name=$2 ;;
    --version) version=$2 ;;
    --description) description=$2 ;;
    --cc) cc=$2 ;;
    --ar) ar=$2 ;;
    --inputs) inputs=$2 ;;
    --flags) flags=$2 ;;
    --headers) headers=$2 ;;
    --shared) shared=$2 ;;
    --pc-template) pc_t=$2 ;;
    --pc-static-template) pc_static_t=$2 ;;
    --cmake-config-template) cmake_t=$2 ;;
    --cmake-version-template) cmake_version_t=$2 ;;
    --bin) bins+=("$2") ;;
    --public) public+=("$2") ;;
    *) die "unknown flag '$1'" ;;
  esac
  shift 2
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib/pkgconfig" "$stage/lib/cmake/$name" "$stage/include/$name" "$stage/bin"

# --- lib/lib<name>.a: one archive of everything a static link needs from the build.
# Third-party archives named by linkopts (a path, or -l:NAME.a found where the
# compiler would find it) go in too; the remaining flags (-ldl, -pthread, ...) are what
# a static link must add, written to the pkg-config and CMake files.
mri="$stage/merge.mri"
echo "CREATE $stage/lib/lib$name.a" >"$mri"
while IFS= read -r f; do
  case "$f" in
    *.a) echo "ADDLIB $f" ;;
    *) echo "ADDMOD $f" ;;
  esac
done <"$inputs" >>"$mri"
private=()
while IFS= read -r flag; do
  archive=""
  case "$flag" in
    /*.a) archive=$flag ;;
    -l:*.a)
      archive=$("$cc" -print-file-name="${flag#-l:}")
      [[ "$archive" == /* ]] || die "linkopt $flag: the compiler does not find ${flag#-l:}"
      ;;
  esac
  if [ -n "$archive" ]; then
    [ -f "$archive" ] || die "linkopt $flag: no such archive $archive"
    echo "ADDLIB $archive" >>"$mri"
  else
    private+=("$flag")
  fi
done <"$flags"
printf 'SAVE\nEND\n' >>"$mri"
"$ar" -M <"$mri" || die "ar -M failed merging the archives listed in $mri"
rm "$mri"
[ -n "$("$ar" t "$stage/lib/lib$name.a")" ] || die "lib$name.a came out empty"

cp "$shared" "$stage/lib/lib$name.so"
chmod 755 "$stage/lib/lib$name.so"
for b in "${bins[@]+"${bins[@]}"}"; do
  cp "$b" "$stage/bin/$(basename "$b")"
  chmod 755 "$stage/bin/$(basename "$b")"
done

# --- include/<name>/: the public headers and, following #include "...", every header
# they reach, at their workspace paths (so that include/<name> is the one -I a user
# needs and the sources' own #include lines hold unchanged).
declare -A path_of=()
while read -r short path; do path_of[$short]=$path; done <"$headers"
declare -A installed=()
queue=("${public[@]}")
while [ ${#queue[@]} -gt 0 ]; do
  h=${queue[0]}
  queue=("${queue[@]:1}")
  [ -z "${installed[$h]:-}" ] || continue
  src=${path_of[$h]:-}
  [ -n "$src" ] || die "public header $h is not a header of the library"
  installed[$h]=1
  mkdir -p "$stage/include/$name/$(dirname "$h")"
  cp "$src" "$stage/include/$name/$h"
  chmod 644 "$stage/include/$name/$h"
  while IFS= read -r inc; do
    # A quoted include is looked up beside the including file first, then from the root.
    beside="$(dirname "$h")/$inc"
    if [ -n "${path_of[$beside]:-}" ]; then
      queue+=("$beside")
    elif [ -n "${path_of[$inc]:-}" ]; then
      queue+=("$inc")
    else
      die "$h includes \"$inc\", which is not a header of the library: it would be missing from the install"
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src")
done

# --- pkg-config and CMake files, relocatable: paths are found from the files' own place.
subst() {
  sed -e "s|@NAME@|$name|g" -e "s|@VERSION@|$version|g" -e "s|@DESCRIPTION@|$description|g" \
    -e "s|@LIBS_PRIVATE@|${private[*]+"${private[*]}"}|g" \
    -e "s|@CMAKE_LIBS_PRIVATE@|$(IFS=';'; echo "${private[*]+"${private[*]}"}")|g" "$1" >"$2"
  chmod 644 "$2"
}
subst "$pc_t" "$stage/lib/pkgconfig/$name.pc"
subst "$pc_static_t" "$stage/lib/pkgconfig/$name-static.pc"
subst "$cmake_t" "$stage/lib/cmake/$name/${name}Config.cmake"
subst "$cmake_version_t" "$stage/lib/cmake/$name/${name}ConfigVersion.cmake"
chmod 644 "$stage/lib/lib$name.a"

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$stage" -cf - \
  bin include lib | gzip -n >"$out"
