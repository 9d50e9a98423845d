"""nvcc through a genrule: one object per .cu file (Bazel 4.2.3 has no CUDA rules), and
the choice between them and the CPU-only build (docs/design/cuda_optional.md): no
toolkit found (@local_cuda, third_party/cuda/cuda_configure.bzl) or --config=cpu_only."""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "CUDA_MISSING", "CUDA_ROOT")

# CUDA's static runtime and what it needs (so binaries start where no driver is).
CUDART_LINKOPTS = [
    CUDA_ROOT + "/lib64/libcudart_static.a",
    "-ldl",
    "-lrt",
    "-lpthread",
]

def if_cuda(with_cuda, without_cuda = []):
    """`with_cuda` where this build uses CUDA, else `without_cuda` (a select)."""
    if not CUDA_FOUND:
        return without_cuda
    return select({
        "//third_party/cuda:cpu_only": without_cuda,
        "//conditions:default": with_cuda,
    })

def cuda_only():
    """target_compatible_with of a target that cannot exist without CUDA."""
    return if_cuda([], ["//third_party/cuda:incompatible"])

def cpu_only_copts():
    """Tells the CPU-only sources why CUDA is off (CHORUS_NO_CUDA_REASON, a C string)."""
    forced = "--config=cpu_only: --define=chorus_cuda=off"
    return if_cuda([], ["-DCHORUS_NO_CUDA_REASON='\"%s\"'" % (CUDA_MISSING or forced)])

# A100 (sm_80), H100/H200 (sm_90) as SASS, plus compute_90 PTX for newer GPUs.
NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "-Xcompiler -fPIC,-ffp-contract=off",
    "-fmad=false",  # the same float operations as the CPU kernels: no fused multiply-add
    "-diag-suppress 2810",
    # A kernel that uses local memory (a stack frame: an array indexed at run time, a
    # by-value parameter struct indexed so) fails the build: per-thread copies cost
    # whole HBM passes (docs/design/kernels.md).
    "-Xptxas -warn-lmem-usage,-Werror",
    "-DCHORUS_KERNELS_ISA=isa_cuda",
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

def cuda_object(name, src, hdrs):
    """Compiles `src` with nvcc into `name`.o; `hdrs` are the headers it includes."""
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".o"],
        target_compatible_with = cuda_only(),
        # A temporary folder of its own: nvcc names its temporary files by process id,
        # and sandboxes in PID namespaces give parallel nvcc runs the same ids in /tmp
        # (seen: "cannot open module id file /tmp/tmpxft_00000002_...", exit 255).
        cmd = "t=$$(mktemp -d) && TMPDIR=$$t %s/bin/nvcc %s -I. -c $(location %s) -o $@; r=$$?; rm -rf $$t; exit $$r" % (
            CUDA_ROOT,
            NVCC_FLAGS,
            src,
        ),
    )
