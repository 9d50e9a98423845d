#!/usr/bin/env bash
# Installs torch_chorus (backend="chorus" for torch.distributed) into the system
# Python, the one Debian's python3-torch serves: bootstraps the machine (apt), builds
# the extension with Bazel, copies the package, and imports it from outside the tree.
#
#   tools/torch/install.sh [--target DIR]   # default: the system Python's site-packages
#   tools/torch/install.sh --uninstall [--target DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

python=/usr/bin/python3
target=""
uninstall=0
while (($#)); do
  case "$1" in
    --target) target=${2:?--target needs a folder}; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    *) echo "install.sh: unknown argument '$1' (--target DIR, --uninstall)" >&2; exit 2 ;;
  esac
done
[ -n "$target" ] || target=$("$python" -c 'import site; print(site.getsitepackages()[0])')

if [ $uninstall -eq 1 ]; then
  rm -rf "$target/torch_chorus"
  echo "install.sh: removed $target/torch_chorus"
  exit 0
fi

tools/bootstrap.sh
bazel build //torch_chorus:_C.so
so="$(bazel info bazel-bin 2>/dev/null)/torch_chorus/_C.so"
[ -f "$so" ] || { echo "install.sh: the build did not produce torch_chorus/_C.so" >&2; exit 1; }

mkdir -p "$target"
staging=$(mktemp -d "$target/.torch_chorus.XXXXXX")
trap 'rm -rf "$staging"' EXIT
cp torch_chorus/__init__.py "$staging/"
cp "$so" "$staging/_C.so"
chmod 0644 "$staging/__init__.py" "$staging/_C.so"
rm -rf "$target/torch_chorus"
mv "$staging" "$target/torch_chorus"
trap - EXIT

# Proof, from a folder that has no torch_chorus of its own.
(cd / && PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$python" -c \
  'import torch, torch_chorus, torch.distributed as dist; assert "CHORUS" in dist.Backend._plugins; print("torch_chorus installed in", torch_chorus.__path__[0], "for torch", torch.__version__)')
