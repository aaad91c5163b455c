"""What a trainer room's BUILD declares besides its libraries: its options (room_options),
and what it reaches (room_deps, for //tests/layering:room_deps_test)."""

def room_deps(name = "room_deps"):
    """A genquery of deps() of every rule of the calling package.

    Call it last in the BUILD file: it covers the rules defined before it. (genquery takes
    no wildcards such as :all, so the rules are named one by one.)
    """
    package = native.package_name()
    rules = sorted(native.existing_rules().keys())
    native.genquery(
        name = name,
        testonly = True,
        expression = "deps(set(%s))" % " ".join(["//%s:%s" % (package, r) for r in rules]),
        scope = [":" + r for r in rules],
        visibility = ["//tests/layering:__pkg__"],
    )

def room_options(name):
    """A room's options: `name`.h and `name`.cc, what the run's flags set in the room.

    A plain struct with its Validate(), on Abseil alone, visible to the run (//trainer) and
    to no other room.
    """
    native.cc_library(
        name = name,
        srcs = [name + ".cc"],
        hdrs = [name + ".h"],
        visibility = ["//trainer:__pkg__"],
        deps = ["@absl"],
    )
