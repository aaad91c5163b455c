"""mpi_cc_test: a googletest binary run as `np` MPI ranks under mpirun."""

def mpi_cc_test(name, srcs, deps = [], np = 2, tags = [], data = [], size = "medium", enabled = True, **kwargs):
    """Builds `name_ranks` (gtest with an MPI-aware main) and a test running it under mpirun.

    `enabled = False` defines nothing (e.g. a CUDA test on a machine without CUDA)."""
    if not enabled:
        return
    native.cc_binary(
        name = name + "_ranks",
        srcs = srcs,
        deps = deps + ["//tests:mpi_test_main"],
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
