"""Finds the CUDA toolkit at load time and writes @local_cuda//:defs.bzl: CUDA_FOUND,
CUDA_ROOT and, where it is missing, CUDA_MISSING (why). The toolkit is the folder named
by CHORUS_CUDA_PATH, else CUDA_PATH, else /usr/local/cuda; it counts only with what the
build uses from it: bin/nvcc, include/cuda_runtime.h and lib64/libcudart_static.a.
Without it chorus builds CPU-only (kernels/cuda/cuda.bzl, docs/design/cuda_optional.md)."""

DEFAULT_ROOT = "/usr/local/cuda"
NEEDED = ["bin/nvcc", "include/cuda_runtime.h", "lib64/libcudart_static.a"]

def _printable(text):
    # CUDA_MISSING travels into a C string through a compiler flag (cuda.bzl).
    return "".join([c if c.isalnum() or c in " /._-+=:,()" else "?" for c in text.elems()])

def _cuda_configure_impl(ctx):
    env = ctx.os.environ
    root, source = DEFAULT_ROOT, "the default"
    for var in ["CHORUS_CUDA_PATH", "CUDA_PATH"]:
        if env.get(var, "") != "":
            root, source = env[var].rstrip("/") or "/", var
            break
    missing = [f for f in NEEDED if not ctx.path(root + "/" + f).exists]
    found = len(missing) == 0
    why = "" if found else _printable("no CUDA toolkit at %s, from %s: %s missing" % (root, source, ", ".join(missing)))
    ctx.file("BUILD", "")
    ctx.file("defs.bzl", "\n".join([
        "CUDA_FOUND = %s" % found,
        "CUDA_ROOT = %r" % root,
        "CUDA_MISSING = %r" % why,
        "",
    ]))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CHORUS_CUDA_PATH", "CUDA_PATH"],
    local = True,
)
