"""Finds PyTorch's C++ API for the system Python at load time (Debian 12:
python3-torch + libtorch-dev, torch 1.13). Where torch is absent, TORCH_FOUND is
False and torch_chorus's targets are not defined: chorus builds without it."""

def _torch_impl(ctx):
    python = ctx.os.environ.get("CHORUS_TORCH_PYTHON", "/usr/bin/python3")
    # Headers must lie under the compiler's own include directories (/usr/include), or
    # Bazel's inclusion check rejects them: Debian's libtorch-dev and pybind11-dev.
    probe = ctx.execute([python, "-c", "\n".join([
        "import os, sysconfig, torch",
        "print(torch.__version__.split('+')[0])",
        "print(int(torch._C._GLIBCXX_USE_CXX11_ABI))",
        "print(';'.join(['/usr/include/torch/csrc/api/include', sysconfig.get_paths()['include']]))",
        "print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
    ])], timeout = 120)
    found = probe.return_code == 0
    for header in ["/usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp", "/usr/include/pybind11/pybind11.h"]:
        found = found and ctx.path(header).exists
    lines = probe.stdout.strip().split("\n") if found else []
    if found and len(lines) != 4:
        found = False
    if found:
        version = lines[0]
        major, minor = version.split(".")[0], version.split(".")[1]
        copts = ["-D_GLIBCXX_USE_CXX11_ABI=" + lines[1], "-DTORCH_CHORUS_TORCH_VERSION=\\\"" + version + "\\\""]
        copts += ["-isystem" + d for d in lines[2].split(";") if d]
        linkopts = ["-L" + d for d in lines[3].split(";") if d]
        linkopts += ["-Wl,-rpath," + d for d in lines[3].split(";") if d]
        linkopts += ["-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]
    else:
        version, copts, linkopts = "", [], []
    ctx.file("BUILD", "")
    ctx.file("defs.bzl", "\n".join([
        "TORCH_FOUND = %s" % found,
        "TORCH_VERSION = %r" % version,
        "TORCH_COPTS = %r" % copts,
        "TORCH_LINKOPTS = %r" % linkopts,
        "TORCH_PYTHON = %r" % python,
        "",
    ]))

torch_repository = repository_rule(
    implementation = _torch_impl,
    environ = ["CHORUS_TORCH_PYTHON"],
    local = True,
)
