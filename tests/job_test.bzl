"""job_test: a shell test that runs whole jobs of Stoker's programs, as a user would."""

# The three programs a job runs.
PROGRAMS = [
    "//data_service",
    "//launcher",
    "//trainer",
]

def job_test(name, size, programs = PROGRAMS, data = [], tags = []):
    """An sh_test of `name`.sh tagged "mpi", with the shared shell set-up and `programs`.

    Its runfiles: job_checks.sh and mpi_env.sh, `programs` (the three programs, unless the
    test runs only some of them, or a stand-in), then `data`.
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = [name + ".sh"],
        data = [
            ":job_checks.sh",
            ":mpi_env.sh",
        ] + programs + data,
        tags = tags + ["mpi"],
    )
