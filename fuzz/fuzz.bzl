"""fuzz_target: a fuzz target over untrusted bytes, and the test over its seed corpus."""

def fuzz_target(name, deps, seeds = []):
    """Builds `name`, a binary of `name`.cc, and `name`_seeds_test.

    The binary links libFuzzer's main() under --config=fuzz, else :corpus_runner's. The
    test runs it over its seed corpus, named by what comes before "_fuzzer" in `name`
    (seed_corpus_test.sh): every seed runs without a finding. `seeds`: the corpus's
    checked-in files (fuzz/seeds/<corpus>/), when it has them.
    """
    if not name.endswith("_fuzzer"):
        fail("a fuzz target's name ends in _fuzzer: " + name)
    native.cc_binary(
        name = name,
        srcs = [name + ".cc"],
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            ":libfuzzer": [],
            "//conditions:default": [":corpus_runner"],
        }),
    )
    native.sh_test(
        name = name + "_seeds_test",
        size = "small",
        srcs = ["seed_corpus_test.sh"],
        args = [
            "$(location :%s)" % name,
            name[:-len("_fuzzer")],
        ],
        data = [
            ":" + name,
            "//tools:fuzz_seeds.py",
        ] + seeds,
    )
