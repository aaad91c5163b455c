"""Rules for Stoker's CUDA code. On a machine without the CUDA toolkit they define
nothing, so `bazel build //...` still works there (the CPU path)."""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "NVCC")
load("//tools:stoker.bzl", "stoker_cc_library", "stoker_cc_test")

# Hopper (H100/H200) machine code, plus PTX for newer GPUs to JIT from.
_NVCC_FLAGS = "-std=c++17 -O3 -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"

def cuda_cc_library(name, **kwargs):
    """A stoker_cc_library that exists only when CUDA was found."""
    if CUDA_ENABLED:
        stoker_cc_library(name = name, **kwargs)

def cuda_cc_test(name, **kwargs):
    """A stoker_cc_test that exists only when CUDA was found; tag it "gpu" if it needs a GPU."""
    if CUDA_ENABLED:
        stoker_cc_test(name = name, **kwargs)

def cuda_kernel_library(name, src, hdrs, kernel_hdrs = [], deps = [], **kwargs):
    """Compiles one .cu file with nvcc into a cc_library (Bazel 4.2.3 has no CUDA rules).

    kernel_hdrs: the other headers `src` includes (device-only ones, and those of the
    libraries in deps), which nvcc reads but the cc_library does not export.
    """
    if not CUDA_ENABLED:
        return
    obj = name + "_kernel.pic.o"
    native.genrule(
        name = name + "_nvcc",
        srcs = [src] + hdrs + kernel_hdrs,
        outs = [obj],
        cmd = "%s %s -I. -c $(location %s) -o $@" % (NVCC, _NVCC_FLAGS, src),
    )
    native.cc_library(
        name = name,
        srcs = [obj],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        **kwargs
    )
