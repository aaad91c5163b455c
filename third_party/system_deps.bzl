"""Repository rules that find Stoker's system dependencies on this machine.

Each rule looks at an environment variable first, then the usual place, and fails with a
message that says what to install when the dependency is missing. Nothing is downloaded.
The generated BUILD files follow TensorStore's system-library pattern: the repository
symlinks the include and lib folders it expects and names them in one cc_library.
"""

def _fail_missing(what, hint):
    fail("\n\nStoker: %s not found.\n  %s\n  (tools/setup.sh installs every dependency.)\n" % (what, hint))

def _run(ctx, args):
    result = ctx.execute(args)
    if result.return_code != 0:
        return None
    return result.stdout.strip()

def _symlink_dir(ctx, source, name):
    if not ctx.path(source).exists:
        return False
    ctx.symlink(source, name)
    return True

# ---------------------------------------------------------------------------------------
# libtorch: LIBTORCH_HOME, else the Python `torch` package (pinned to torch==2.11.0).

_TORCH_VERSION = "2.11.0"

def _libtorch_impl(ctx):
    home = ctx.os.environ.get("LIBTORCH_HOME", "")
    if not home:
        python = ctx.os.environ.get("STOKER_PYTHON", "") or "python3"
        home = _run(ctx, [python, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"])
        if not home:
            _fail_missing(
                "libtorch",
                "Set LIBTORCH_HOME, or `pip install torch==%s` for python3 on PATH." % _TORCH_VERSION,
            )
    for sub in ["lib/libtorch_cpu.so", "lib/libc10.so"]:
        if not ctx.path(home + "/" + sub).exists:
            _fail_missing("libtorch (%s/%s)" % (home, sub), "The torch installation looks incomplete.")
    version_h = ctx.read(home + "/include/torch/headeronly/version.h")
    if ('"%s"' % _TORCH_VERSION) not in version_h:
        _fail_missing(
            "libtorch %s (found another version at %s)" % (_TORCH_VERSION, home),
            "`pip install torch==%s`: the GPU hosts run that version." % _TORCH_VERSION,
        )
    ctx.symlink(home + "/include", "include")
    ctx.symlink(home + "/lib", "lib")
    has_cuda = ctx.path(home + "/lib/libtorch_cuda.so").exists
    ctx.template("BUILD.bazel", ctx.attr.build_file, substitutions = {
        "%{cuda_libs}": '"-ltorch_cuda", "-lc10_cuda",' if has_cuda else "",
        "%{lib}": str(ctx.path(home + "/lib").realpath),
    })
    ctx.file("defs.bzl", "LIBTORCH_HAS_CUDA = %s\n" % has_cuda)

libtorch_configure = repository_rule(
    implementation = _libtorch_impl,
    attrs = {"build_file": attr.label(allow_single_file = True)},
    environ = ["LIBTORCH_HOME", "STOKER_PYTHON", "PATH"],
    local = True,
)

# ---------------------------------------------------------------------------------------
# CUDA toolkit with cuDNN and NCCL: CUDA_HOME, else /usr/local/cuda. Optional: without it
# the CPU path still builds, and `CUDA_ENABLED` in @local_cuda//:defs.bzl is False.

def _cuda_impl(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    found = (ctx.path(home + "/include/cuda_runtime.h").exists and
             ctx.path(home + "/lib64/libcudart.so").exists)
    if found:
        for lib in ["libnccl.so", "libcudnn.so"]:
            if not ctx.path(home + "/lib64/" + lib).exists:
                _fail_missing("%s in %s/lib64" % (lib, home), "Install cuDNN 9 and NCCL into the CUDA toolkit.")
        ctx.symlink(home + "/include", "include")
        ctx.symlink(home + "/lib64", "lib64")
        ctx.symlink(home + "/bin", "bin")
        ctx.template("BUILD.bazel", ctx.attr.build_file, substitutions = {})
    else:
        ctx.file("BUILD.bazel", "# No CUDA toolkit at %s: CPU-only build.\n" % home)
    ctx.file("defs.bzl", """CUDA_ENABLED = %s
NVCC = "%s/bin/nvcc"

def if_cuda(if_true, if_false = []):
    \"\"\"Selects `if_true` when the CUDA toolkit was found at configure time.\"\"\"
    return if_true if CUDA_ENABLED else if_false
""" % (found, str(ctx.path(home).realpath) if found else home))

cuda_configure = repository_rule(
    implementation = _cuda_impl,
    attrs = {"build_file": attr.label(allow_single_file = True)},
    environ = ["CUDA_HOME"],
    local = True,
)

# ---------------------------------------------------------------------------------------
# Open MPI: include and link flags from `mpicc` itself.

def _mpi_impl(ctx):
    mpicc = ctx.os.environ.get("MPICC", "") or "mpicc"
    compile = _run(ctx, [mpicc, "--showme:incdirs"])
    link = _run(ctx, [mpicc, "--showme:link"])
    if compile == None or link == None:
        _fail_missing("Open MPI (mpicc)", "`apt-get install libopenmpi-dev openmpi-bin`, or set MPICC.")
    incdirs = compile.split(" ")
    if not ctx.path(incdirs[0] + "/mpi.h").exists:
        _fail_missing("mpi.h in %s" % incdirs[0], "`apt-get install libopenmpi-dev`.")
    names = []
    for i, d in enumerate(incdirs):
        name = "include%d" % i
        ctx.symlink(d, name)
        names.append(name)
    ctx.template("BUILD.bazel", ctx.attr.build_file, substitutions = {
        "%{hdrs}": ", ".join(['"%s/**/*.h"' % n for n in names]),
        "%{includes}": ", ".join(['"%s"' % n for n in names]),
        "%{linkopts}": ", ".join(['"%s"' % f for f in link.split(" ") if f]),
    })

mpi_configure = repository_rule(
    implementation = _mpi_impl,
    attrs = {"build_file": attr.label(allow_single_file = True)},
    environ = ["MPICC", "PATH"],
    local = True,
)

# ---------------------------------------------------------------------------------------
# Libraries whose headers live in /usr/include (Debian's -dev packages): the rule checks
# the header and takes link flags from pkg-config, or the fixed flags given.

def _debian_impl(ctx):
    header = "/usr/include/" + ctx.attr.header
    if not ctx.path(header).exists:
        _fail_missing(header, "`apt-get install %s`." % ctx.attr.package)
    linkopts = ctx.attr.linkopts
    if ctx.attr.pkg_config:
        flags = _run(ctx, ["pkg-config", "--libs"] + ctx.attr.pkg_config)
        if flags == None:
            _fail_missing("pkg-config data for %s" % ctx.attr.package, "`apt-get install %s pkg-config`." % ctx.attr.package)
        linkopts = [f for f in flags.split(" ") if f]
    build = """# Generated by debian_library: headers in /usr/include, from Debian's {package}.
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "{name}",
    linkopts = {linkopts},
)
""".format(package = ctx.attr.package, name = ctx.attr.target, linkopts = repr(linkopts))
    for name, opts in ctx.attr.extra_targets.items():
        build += "\ncc_library(\n    name = %r,\n    linkopts = %r,\n)\n" % (name, opts)
    ctx.file("BUILD.bazel", build)

debian_library = repository_rule(
    implementation = _debian_impl,
    attrs = {
        "header": attr.string(mandatory = True),
        "package": attr.string(mandatory = True),
        "target": attr.string(mandatory = True),
        "pkg_config": attr.string_list(),
        "linkopts": attr.string_list(),
        "extra_targets": attr.string_list_dict(),
    },
    local = True,
)

# ---------------------------------------------------------------------------------------
# nvJPEG's header (nvjpeg.h) only: the trainer loads libnvjpeg.so.13 with dlopen at run
# time, so nothing links against it. NVJPEG_HOME (a folder with include/nvjpeg.h), else
# the `nvidia-nvjpeg` wheel of python3 (nvidia/cu13/include). Needed only where CUDA is.

def _nvjpeg_impl(ctx):
    home = ctx.os.environ.get("NVJPEG_HOME", "")
    header = home + "/include/nvjpeg.h" if home else ""
    if not home:
        python = ctx.os.environ.get("STOKER_PYTHON", "") or "python3"
        site = _run(ctx, [python, "-c", "import nvidia, os; print(list(nvidia.__path__)[0])"])
        if site:
            header = site + "/cu13/include/nvjpeg.h"
    if not header or not ctx.path(header).exists:
        cuda_home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
        if ctx.path(cuda_home + "/include/nvjpeg.h").exists:
            header = cuda_home + "/include/nvjpeg.h"
        else:
            _fail_missing(
                "nvjpeg.h",
                "`pip install nvidia-nvjpeg` for python3 on PATH, or set NVJPEG_HOME.",
            )
    ctx.symlink(header, "include/nvjpeg.h")
    ctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = ["include/nvjpeg.h"],
    includes = ["include"],
    deps = ["@local_cuda//:headers"],
)
""")

nvjpeg_configure = repository_rule(
    implementation = _nvjpeg_impl,
    environ = ["NVJPEG_HOME", "CUDA_HOME", "STOKER_PYTHON", "PATH"],
    local = True,
)

def stoker_system_deps():
    """Declares every system dependency. Called from WORKSPACE."""
    libtorch_configure(name = "libtorch", build_file = "//third_party:libtorch.BUILD")
    cuda_configure(name = "local_cuda", build_file = "//third_party:cuda.BUILD")
    nvjpeg_configure(name = "nvjpeg")
    mpi_configure(name = "mpi", build_file = "//third_party:mpi.BUILD")
    debian_library(
        name = "absl",
        target = "absl",
        header = "absl/status/status.h",
        package = "libabsl-dev",
        pkg_config = [
            "absl_flags_parse",
            "absl_flags_usage",
            "absl_status",
            "absl_statusor",
            "absl_strings",
            "absl_str_format",
            "absl_synchronization",
            "absl_time",
        ],
    )
    debian_library(
        name = "gtest",
        target = "gtest",
        header = "gtest/gtest.h",
        package = "libgtest-dev",
        linkopts = ["-lgtest", "-lgtest_main", "-pthread"],
        # For test binaries with a main() of their own (MPI ranks).
        extra_targets = {"gtest_no_main": ["-lgtest", "-pthread"]},
    )
    debian_library(
        name = "turbojpeg",
        target = "turbojpeg",
        header = "turbojpeg.h",
        package = "libturbojpeg0-dev",
        linkopts = ["-lturbojpeg"],
    )
    # libjpeg-turbo's libjpeg API (jpeg_crop_scanline, jpeg_skip_scanlines: decoding only
    # the region a crop needs), which libturbojpeg does not export.
    debian_library(
        name = "libjpeg",
        target = "libjpeg",
        header = "jpeglib.h",
        package = "libjpeg62-turbo-dev",
        linkopts = ["-ljpeg"],
    )
    # Header-only: the trainer reads torch.export archives' JSON with it.
    debian_library(
        name = "nlohmann_json",
        target = "nlohmann_json",
        header = "nlohmann/json.hpp",
        package = "nlohmann-json3-dev",
    )
    debian_library(
        name = "libpng",
        target = "libpng",
        header = "png.h",
        package = "libpng-dev",
        pkg_config = ["libpng16"],
    )
