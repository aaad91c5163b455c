#!/usr/bin/env bash
# Builds the libraries that carry lock annotations (ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...) or use absl::Mutex with clang's thread-safety analysis
# (--config=threadsafety in .bazelrc), whose findings are errors. The default compiler ignores
# the annotations; this build is what checks them. Only those libraries' own sources are
# compiled (plus those of the libraries that include a header-only one, where its inline
# bodies are analysed): not their dependencies, the tests or the programs.
# Usage: tools/check_thread_safety.sh [BAZEL BUILD FLAGS...]   (e.g. --disk_cache=DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

annotations='ABSL_(PT_)?GUARDED_BY|ABSL_(EXCLUSIVE_|SHARED_)?LOCKS_(REQUIRED|EXCLUDED)|ABSL_LOCK_RETURNED|ABSL_(EXCLUSIVE_|SHARED_)?(LOCK_FUNCTION|TRYLOCK_FUNCTION|ACQUIRE|RELEASE)|absl::Mutex'
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' ':!:third_party' ':!:tools' |
  xargs grep -lE "$annotations")
(( ${#files[@]} )) || { echo "check_thread_safety: no annotated file"; exit 0; }

# The cc_library of each file, and for a header-only one the libraries that depend on it.
# --keep_going: a file that no BUILD rule names is left out (exit code 3, partial result).
libs_query="kind(cc_library, rdeps(//..., set(${files[*]}), 1))"
query_rc=0
listed="$(bazel query --keep_going --noshow_progress \
  "let libs = $libs_query in \$libs + kind(cc_library, rdeps(//..., attr(srcs, '^\[\]$', \$libs), 1))")" ||
  query_rc=$?
mapfile -t targets < <(sort <<<"$listed" | grep '^//' || true)
if (( query_rc != 0 && query_rc != 3 )) || (( ${#targets[@]} == 0 )); then
  echo "check_thread_safety: FAILED: bazel query found no library (exit code $query_rc)" >&2
  exit 1
fi
echo "check_thread_safety: ${#targets[@]} libraries: ${targets[*]}"
# Their object files only (the output group of compile actions): neither their dependencies'
# objects nor any link is needed for the analysis.
if ! bazel build --config=threadsafety --output_groups=compilation_outputs --keep_going "$@" \
    "${targets[@]}"; then
  echo "check_thread_safety: FAILED (clang's thread-safety analysis or compilation; see the errors above)" >&2
  exit 1
fi
echo "check_thread_safety: passed"
