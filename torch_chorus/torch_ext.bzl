"""A Python extension module against the system's torch; nothing where torch is absent."""

load("@torch//:defs.bzl", "TORCH_COPTS", "TORCH_FOUND", "TORCH_LINKOPTS")

def torch_extension(name, srcs, deps):
    if not TORCH_FOUND:
        return
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = TORCH_COPTS + ["-fvisibility=hidden", "-Wno-unused-parameter"],
        linkopts = TORCH_LINKOPTS,
        linkshared = True,
        deps = deps,
    )
