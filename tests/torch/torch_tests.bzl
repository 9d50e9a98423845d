"""One sh_test per pytest file of the torch_chorus suite; none where torch is absent."""

load("@torch//:defs.bzl", "TORCH_FOUND", "TORCH_PYTHON")

def torch_pytest(name, src, size = "large", data = []):
    if not TORCH_FOUND:
        return
    native.sh_test(
        name = name,
        size = size,
        srcs = ["run_pytest.sh"],
        args = [TORCH_PYTHON, native.package_name() + "/" + src],
        data = [src, "//torch_chorus:package"] + data,
    )
