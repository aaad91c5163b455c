"""mpi_cc_test: a googletest binary run as `np` MPI ranks under mpirun."""

load("//tools:stoker.bzl", "with_gtest")

def mpi_cc_test(name, srcs = None, deps = [], np = 2, tags = [], data = [], size = "medium", enabled = True, **kwargs):
    """Builds `name_ranks` (gtest with an MPI-aware main) and a test running it under mpirun.

    As with stoker_cc_test, srcs defaults to `name`.cc and googletest joins deps (here without
    its main). `enabled = False` defines nothing (e.g. a CUDA test on a machine without CUDA).
    """
    if not enabled:
        return
    native.cc_binary(
        name = name + "_ranks",
        srcs = srcs if srcs != None else [name + ".cc"],
        deps = with_gtest(deps, "@gtest//:gtest_no_main") + ["//tests:mpi_test_main"],
        testonly = True,
        data = data,
        **kwargs
    )
    native.sh_test(
        name = name,
        srcs = ["//tests:run_mpi_test.sh"],
        args = [str(np), "$(location :%s_ranks)" % name],
        data = [":%s_ranks" % name, "//tests:mpi_env.sh"] + data,
        tags = tags + ["mpi"],
        size = size,
    )
