"""nvcc through a genrule: one object per .cu file (Bazel 4.2.3 has no CUDA rules)."""

CUDA_ROOT = "/usr/local/cuda"

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
        # A temporary folder of its own: nvcc names its temporary files by process id,
        # and sandboxes in PID namespaces give parallel nvcc runs the same ids in /tmp
        # (seen: "cannot open module id file /tmp/tmpxft_00000002_...", exit 255).
        cmd = "t=$$(mktemp -d) && TMPDIR=$$t %s/bin/nvcc %s -I. -c $(location %s) -o $@; r=$$?; rm -rf $$t; exit $$r" % (
            CUDA_ROOT,
            NVCC_FLAGS,
            src,
        ),
    )
