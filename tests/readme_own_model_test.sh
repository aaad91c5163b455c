#!/usr/bin/env bash
# README.md's "Train your own model" runs as written: its Python files (the blocks that open
# with `# name.py`) are written and its shell blocks run in order, in a fresh folder laid
# out as a checkout (tools/, bazel-bin/ with the built programs), with python3 the python
# that has torch. The section ends with the trained weights back in the user's class.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

work="$out/checkout"
mkdir -p "$work/tools" "$work/bazel-bin/launcher" "$work/bazel-bin/trainer" "$work/bazel-bin/data_service" "$out/bin"
ln -s "$root/tools/export_model.py" "$root/tools/make_digits.py" "$work/tools/"
ln -s "$root/launcher/launcher" "$work/bazel-bin/launcher/launcher"
ln -s "$root/trainer/trainer" "$work/bazel-bin/trainer/trainer"
ln -s "$root/data_service/data_service" "$work/bazel-bin/data_service/data_service"
ln -s "$(command -v "$python")" "$out/bin/python3"

# The section's blocks as one script: a Python block named by its first line becomes that
# file; a sh block runs as it is.
awk '
  /^## / { inside = ($0 == "## Train your own model") }
  !inside { next }
  /^```python$/ { block = "python"; lines = ""; next }
  /^```sh$/ { block = "sh"; next }
  /^```$/ {
    if (block == "python" && name != "") { printf "cat > %s <<'"'"'STOKER_README_EOF'"'"'\n%sSTOKER_README_EOF\n", name, lines }
    block = ""; name = ""; next
  }
  block == "python" { if (lines == "" && $0 ~ /^# [a-z_]+\.py$/) name = $2; lines = lines $0 "\n"; next }
  block == "sh" { print }
' "$root/README.md" > "$out/readme_section.sh"
cat "$out/readme_section.sh"
grep -q "launcher/launcher" "$out/readme_section.sh" || { echo "FAIL: no training command found in the section"; exit 1; }

cd "$work"
PATH="$out/bin:$PATH" bash -euo pipefail "$out/readme_section.sh" 2>&1 | tee "$out/readme.log"
grep -q "^predicted: \[" "$out/readme.log" || { echo "FAIL: the trained weights did not run in Python"; exit 1; }
grep -q "validation" "$out/readme.log" || { echo "FAIL: no validation result in the training output"; exit 1; }
echo "PASS"
