#!/usr/bin/env bash
# Builds the libraries that carry lock annotations (ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...) or use absl::Mutex with clang's thread-safety analysis
# (--config=threadsafety in .bazelrc), whose findings are errors. The default compiler ignores
# the annotations; this build is what checks them. Only those libraries are compiled (plus
# the libraries that include a header-only one, where its inline bodies are analysed), not
# the tests or the programs.
# Usage: tools/check_thread_safety.sh [BAZEL BUILD FLAGS...]   (e.g. --disk_cache=DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

annotations='ABSL_(PT_)?GUARDED_BY|ABSL_(EXCLUSIVE_|SHARED_)?LOCKS_(REQUIRED|EXCLUDED)|ABSL_LOCK_RETURNED|ABSL_(EXCLUSIVE_|SHARED_)?(LOCK_FUNCTION|TRYLOCK_FUNCTION|ACQUIRE|RELEASE)|absl::Mutex'
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' ':!:third_party' ':!:tools' |
  xargs grep -lE "$annotations")
(( ${#files[@]} )) || { echo "check_thread_safety: no annotated file"; exit 0; }

# The cc_library of each file, and for a header-only one the libraries that depend on it.
libs_query="kind(cc_library, rdeps(//..., set(${files[*]}), 1))"
mapfile -t targets < <(bazel query --noshow_progress \
  "let libs = $libs_query in \$libs + kind(cc_library, rdeps(//..., attr(srcs, '^\[\]$', \$libs), 1))" |
  sort)
echo "check_thread_safety: ${#targets[@]} libraries: ${targets[*]}"
if ! bazel build --config=threadsafety --keep_going "$@" "${targets[@]}"; then
  echo "check_thread_safety: FAILED (clang's thread-safety analysis or compilation; see the errors above)" >&2
  exit 1
fi
echo "check_thread_safety: passed"
