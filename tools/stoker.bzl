"""Stoker's C++ rules: one library per concept, its googletest binary right after it.

A concept `foo` is foo.h, foo.cc and foo_test.cc, so the rules take their files from the
name unless told otherwise:

    stoker_cc_library(
        name = "foo",          # srcs = ["foo.cc"], hdrs = ["foo.h"]
        deps = ["@absl"],
    )

    stoker_cc_test(
        name = "foo_test",     # srcs = ["foo_test.cc"], and googletest with its main()
        deps = [":foo"],
    )

Code with a CUDA path (`#ifdef STOKER_WITH_CUDA`) names what that path needs in
`cuda_deps`: where the CUDA toolkit was found, the rule is compiled with STOKER_WITH_CUDA
defined and depends on cuda_deps too; elsewhere it is the CPU code alone.

Every other attribute passes through to cc_library and cc_test unchanged.
"""

load("@local_cuda//:defs.bzl", "if_cuda")

def with_gtest(deps, gtest = "@gtest"):
    """`deps` with `gtest` added where buildifier sorts it: before the later `@` repositories.

    The order of deps is the order of the include paths and libraries on the compile and
    link command lines.
    """
    for i, dep in enumerate(deps):
        if dep.startswith("@") and dep > gtest:
            return deps[:i] + [gtest] + deps[i:]
    return deps + [gtest]

def _cuda_path(kwargs, cuda_deps):
    """kwargs with the CUDA path's define and deps, where CUDA was found."""
    if cuda_deps == None:
        return kwargs
    return dict(
        kwargs,
        local_defines = kwargs.get("local_defines", []) + if_cuda(["STOKER_WITH_CUDA"]),
        deps = kwargs.get("deps", []) + if_cuda(cuda_deps),
    )

def stoker_cc_library(name, srcs = None, hdrs = None, cuda_deps = None, **kwargs):
    """A cc_library of `name`.cc and `name`.h, unless srcs or hdrs say otherwise."""
    native.cc_library(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        hdrs = hdrs if hdrs != None else [name + ".h"],
        **_cuda_path(kwargs, cuda_deps)
    )

def stoker_cc_test(name, srcs = None, deps = [], cuda_deps = None, **kwargs):
    """A googletest cc_test of `name`.cc (unless srcs says otherwise), linked with gtest_main."""
    kwargs = _cuda_path(dict(kwargs, deps = deps), cuda_deps)
    kwargs["deps"] = with_gtest(kwargs["deps"])
    native.cc_test(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        **kwargs
    )
