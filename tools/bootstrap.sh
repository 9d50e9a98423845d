#!/usr/bin/env bash
# Installs, from Debian's apt, everything chorus needs to build, test and benchmark.
# Idempotent and quiet: does nothing when every package is already installed.
set -euo pipefail

PACKAGES=(
  # build: offline Bazel (see docs/ARCHITECTURE.md, "Build"), GoogleTest sources
  bazel-bootstrap bazel-rules-java googletest
  # building C++ programs against an installed chorus (tests/dist): pkg-config, CMake
  pkg-config cmake
  # transports: io_uring (static liburing), verbs headers (libibverbs is dlopen'ed)
  liburing-dev libibverbs-dev
  # two nodes on one machine (ip netns, veth), the raw-TCP reference
  iproute2 iperf3
  # side-by-side baselines for chorus_perf and the demo
  libgloo-dev openmpi-bin libopenmpi-dev gnuplot-nox
  python3
  # fuzzing (tools/fuzz/run.sh): clang-14 with libFuzzer's runtime
  clang-14 libclang-rt-14-dev
  # torch_chorus: PyTorch 1.13 for the system Python, its C++ API, pybind11, pytest
  python3-torch libtorch-dev pybind11-dev python3-pytest
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: these Debian packages are missing: ${missing[*]}" >&2
  echo "bootstrap: run as root (or: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "bootstrap: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
