#!/usr/bin/env bash
# Malformed model and weights files under the launcher (2 ranks): each is refused by name on
# every rank before any step, and the job exits 2 (fix the file or the command), or 74 when
# the file cannot be read (fix the storage); no rank aborts or dumps core. Cases: a
# safetensors file with a negative shape, one whose header is cut short, a torch.save file
# without --allow_pickle, an archive whose weight has a negative size (a valid zip, edited
# from fuzz/seeds/export_archive/tiny_net.pt2), an archive that is not a zip, and a file
# whose read fails with EIO (/proc/self/mem, as a failing disk gives).
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
cd "$out"  # core files, if any rank dumped one, would land here
ulimit -c unlimited 2>/dev/null || true
failures=0

"$python" - "$out" "$root/fuzz/seeds/export_archive/tiny_net.pt2" <<'PY'
import json, struct, sys, zipfile
import torch
out, seed = sys.argv[1], sys.argv[2]
def safetensors(header, data=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data
with open(f"{out}/negative_shape.safetensors", "wb") as f:
    f.write(safetensors({"conv1.weight": {"dtype": "F32", "shape": [-1, 3], "data_offsets": [0, 12]}},
                        b"\0" * 12))
with open(f"{out}/cut.safetensors", "wb") as f:
    f.write(safetensors({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)[:20])
torch.save({"conv1.weight": torch.zeros(1)}, f"{out}/pickled.pt")
with zipfile.ZipFile(seed) as src, zipfile.ZipFile(f"{out}/negative_size.pt2", "w") as dst:
    for info in src.infolist():
        data = src.read(info)
        if info.filename.endswith("data/weights/train_weights_config.json"):
            config = json.loads(data)
            config["config"]["conv.weight"]["tensor_meta"]["sizes"][0]["as_int"] = -4
            data = json.dumps(config).encode()
        dst.writestr(info.filename, data)
with open(f"{out}/not_a_zip.pt2", "wb") as f:
    f.write(b"PK\x03\x04" + b"\xff" * 4000)
PY

# check NAME CODE PATTERN TRAINER_FLAGS...: the job exits CODE, its first error line
# matches PATTERN, no step ran, and no core file was left.
check() {
  local name="$1" code="$2" pattern="$3"; shift 3
  run_launcher_job 120 badmodel "$name" \
    --dataset=synthetic --synthetic_samples=256 --synthetic_classes=2 --data_threads=1 -- \
    --num_classes=2 --image_size=8 --batch_size=8 --epochs=1 "$@"
  if ! expect_exit "$out/$name.log" "$code" "$rc" "$pattern"; then
    failures=$((failures + 1))
  elif grep -q "epoch 1 step\|Aborted\|core dumped\|signal 6" "$out/$name.log"; then
    cat "$out/$name.log"; echo "FAIL: $name: a step ran, or a rank aborted"
    failures=$((failures + 1))
  elif ls "$out" | grep -q '^core'; then
    echo "FAIL: $name: a core file was left: $(ls "$out" | grep '^core')"
    failures=$((failures + 1))
  fi
}

check negative_shape 2 "--init_weights=$out/negative_shape.safetensors: safetensors file: tensor 'conv1.weight': shape \[-1,3\] is not a list of sizes >= 0" \
  --model=small_cnn --init_weights="$out/negative_shape.safetensors"
check cut_header 2 "--init_weights=$out/cut.safetensors: safetensors file: the header runs past the end" \
  --model=small_cnn --init_weights="$out/cut.safetensors"
check pickle_refused 2 "--init_weights=$out/pickled.pt: torch.save's format is a Python pickle.*--allow_pickle" \
  --model=small_cnn --init_weights="$out/pickled.pt"
check archive_negative_size 2 "--model=$out/negative_size.pt2: weight conv.weight: sizes .* are not a view of a storage" \
  --model="$out/negative_size.pt2"
check archive_not_a_zip 2 "--model=$out/not_a_zip.pt2: not a readable torch.export archive" \
  --model="$out/not_a_zip.pt2"
check unreadable 74 "--init_weights=/proc/self/mem: reading the file: .*(I/O|Input/output) error" \
  --model=small_cnn --init_weights=/proc/self/mem

[[ $failures -eq 0 ]] || { echo "FAIL: $failures case(s)"; exit 1; }
echo "PASS: every malformed model or weights file refused by name, exit 2 (74 unreadable)"
