#!/usr/bin/env bash
# The GPU tests, run on a GPU host from the bundle (tools/bundle.sh) by its entry point:
#   bundle/bin/gpu.sh checks [OUT_DIR]
# Each check prints PASS, FAIL, or SKIP when it could not run here (a check that exits 77,
# or one this host lacks the GPUs for); the last line counts them. Logs go to OUT_DIR.
# STOKER_GPU_CHECKS=REGEX runs only the checks whose names match it.
set -uo pipefail
bundle="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-/tmp/stoker-gpu-checks}"
mkdir -p "$out"
source "$bundle/bin/mpi_env.sh"
stoker="$bundle/stoker"
export out stoker bundle
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
passed=0; failed=0; skipped=0

# Losses over the first 30 steps of a run on varied batches (the data service's synthetic
# dataset, one GPU): bf16 and fp16 with the fused blocks and CUDA graphs (the default), and
# bf16 on the plain path (neither), against the plain fp32 path (same weights, same
# batches). $CHECK_MODEL (default resnet18) is the model: a built-in name or an archive
# from tools/export_model.py (100 classes, 128x128).
precision_run() {  # precision_run NAME PRECISION [TRAINER FLAGS...]
  local name="$1" precision="$2"; shift 2
  "$stoker" launcher --np=1 --dataset=synthetic --synthetic_samples=1920 --synthetic_classes=100 --seed=5 -- --model="${CHECK_MODEL:-resnet18}" --num_classes=100 --image_size=128 \
    --batch_size=64 --epochs=1 --lr=0.005 --precision="$precision" \
    --loss_log="$out/loss_$name.txt" --log_every=30 "$@"
}
precision_compare() {  # precision_compare REFERENCE NAME...: each run's losses against REFERENCE's
  # Each batch's loss is one draw of a noisy curve, and two fp32 runs of the same batches
  # part by several percent within 30 steps (non-deterministic kernels, amplified by the
  # optimizer): the check compares the curves' means over windows of 5 batches (the last
  # of them the mean of steps 26-30), and prints the worst single step beside it. A second
  # fp32 run (REFERENCE_again), when there is one, shows that noise floor.
  python3 - "$out" "$@" <<'PY'
import os, sys
out, reference, names = sys.argv[1], sys.argv[2], sys.argv[3:]
def losses(p): return [float(l.split()[2]) for l in open(f"{out}/loss_{p}.txt")]
def windows(x): return [sum(x[i:i + 5]) / 5 for i in range(0, len(x) - 4, 5)]
def gaps(a, b): return [abs(x - y) / max(abs(y), 1e-3) for x, y in zip(a, b)]
ref = losses(reference)
if os.path.exists(f"{out}/loss_{reference}_again.txt"):
    again = losses(f"{reference}_again")
    print(f"noise floor: a second {reference} run's worst 5-step-mean gap {max(gaps(windows(again), windows(ref))):.3f}, "
          f"worst single step {max(gaps(again, ref)):.3f}")
failures = []
for p in names:
    got = losses(p)
    step, window = gaps(got, ref), gaps(windows(got), windows(ref))
    print(f"{p}: 5-step means {['%.3f' % x for x in windows(got)]}; {reference} {['%.3f' % x for x in windows(ref)]}; "
          f"worst 5-step-mean gap {max(window):.3f} (window {window.index(max(window)) + 1} of {len(window)}); "
          f"worst single step {max(step):.3f} (at step {step.index(max(step)) + 1})")
    if len(got) != 30 or len(ref) != 30: failures.append(f"{p}: missing steps")
    if max(window) >= 0.05: failures.append(f"{p} loss left {reference}'s by {max(window):.3f} (5-step means)")
    if sum(got[-5:]) >= sum(got[:5]): failures.append(f"{p} loss did not fall")
assert not failures, "; ".join(failures)
PY
}
# Stopped after 20 steps and resumed, a deterministic run with the fused blocks gives the
# uninterrupted run's losses bit for bit. $RESUME_MODEL (default resnet18): a built-in name
# or an archive (10 classes, 64x64).
resume_run() {  # resume_run NAME [FLAGS...]
  local name="$1"; shift
  "$stoker" launcher --np=1 --dataset=synthetic --synthetic_samples=1280 --synthetic_classes=10 --seed=9 -- --model="${RESUME_MODEL:-resnet18}" --num_classes=10 --image_size=64 \
    --batch_size=64 --epochs=2 --deterministic --log_every=20 "$@"
}
resume_bitwise() {  # resume_bitwise [PREFIX]: loss files and checkpoints named PREFIX...
  local p="${1:-resume}"
  rm -rf "$out/${p}_ckpt" "$out"/loss_"${p}"_*.txt
  resume_run whole --loss_log="$out/loss_${p}_whole.txt" || return 1
  resume_run first --loss_log="$out/loss_${p}_first.txt" --checkpoint_dir="$out/${p}_ckpt" \
    --stop_after_steps=20
  local rc=$?
  (( rc == 75 )) || { echo "the stopped run exited $rc, expected 75"; return 1; }
  resume_run rest --loss_log="$out/loss_${p}_rest.txt" --checkpoint_dir="$out/${p}_ckpt" \
    --resume=auto &&
  cat "$out/loss_${p}_first.txt" "$out/loss_${p}_rest.txt" > "$out/loss_${p}_joined.txt" &&
  echo "steps: $(wc -l < "$out/loss_${p}_whole.txt") whole, $(wc -l < "$out/loss_${p}_joined.txt") stopped + resumed" &&
  cmp "$out/loss_${p}_whole.txt" "$out/loss_${p}_joined.txt" && echo "losses identical bit for bit"
}
# Periodic asynchronous checkpoints taken while training goes on (their copies overlap the
# next step, whose optimizer step waits for them on the device: Note [Snapshot buffers] in
# trainer/checkpoint/training_state.h): the run's losses are the uninterrupted run's, and a
# run resumed from the checkpoint of step 15 (taken with the CUDA graphs replaying) gives the
# uninterrupted run's losses from step 16 on, bit for bit.
resume_periodic() {
  local p=periodic
  rm -rf "$out/${p}_ckpt" "$out/${p}_rest_ckpt" "$out"/loss_"${p}"_*.txt
  resume_run whole --loss_log="$out/loss_${p}_whole.txt" || return 1
  resume_run first --loss_log="$out/loss_${p}_first.txt" --checkpoint_dir="$out/${p}_ckpt" \
    --checkpoint_every_steps=5 --keep_checkpoints=0 2>&1 | tee "$out/${p}_first_run.log" | tail -n 3
  (( PIPESTATUS[0] == 0 )) || return 1
  grep -hE "checkpoint snapshots:" "$out/${p}_first_run.log" || { echo "no snapshot buffers"; return 1; }
  cmp "$out/loss_${p}_whole.txt" "$out/loss_${p}_first.txt" || { echo "checkpoints changed the losses"; return 1; }
  resume_run rest --loss_log="$out/loss_${p}_rest.txt" --checkpoint_dir="$out/${p}_rest_ckpt" \
    --resume="$out/${p}_ckpt/ckpt-000000000015.stoker" || return 1
  head -n 15 "$out/loss_${p}_whole.txt" | cat - "$out/loss_${p}_rest.txt" | cmp - "$out/loss_${p}_whole.txt" &&
    echo "losses identical bit for bit (resumed from step 15 of a run checkpointing every 5 steps)"
}
# The training step captured as CUDA graphs and replayed (the default) against every step
# uncaptured (--nocuda_graphs): a deterministic run gives the same losses bit for bit, and
# the captured run says how many graphs it captured and replayed.
graphs_bitwise() {  # graphs_bitwise PREFIX [FLAGS...]
  local p="$1"; shift
  resume_run graphs --loss_log="$out/loss_${p}_graphs.txt" "$@" 2>&1 | tee "$out/${p}_graphs_run.log" | tail -n 3
  (( PIPESTATUS[0] == 0 )) || return 1
  grep -hE "CUDA graphs: [1-9][0-9]* captured" "$out/${p}_graphs_run.log" || { echo "no graph was captured"; return 1; }
  resume_run uncaptured --loss_log="$out/loss_${p}_uncaptured.txt" --nocuda_graphs "$@" | tail -n 3
  (( PIPESTATUS[0] == 0 )) || return 1
  echo "steps: $(wc -l < "$out/loss_${p}_graphs.txt") with graphs, $(wc -l < "$out/loss_${p}_uncaptured.txt") without"
  cmp "$out/loss_${p}_graphs.txt" "$out/loss_${p}_uncaptured.txt" && echo "losses identical bit for bit"
}
# ResNet-18 trained on scikit-learn's digits (the bundle's image folder, 32x32, the data
# service's training transform), bf16: the validation accuracy reached with the default step
# (fused blocks, CUDA graphs) and with the plain path, each sample counted once. Two paths
# whose numerics differ diverge, and one run of each differs by more than the validation
# set's sampling error alone (cuDNN's autotuned kernels are not deterministic), so each side
# is trained from DIGITS_SEEDS seeds (each seed fixes the initialisation and the data order)
# and their means are compared: "the same accuracy" is a gap under three standard errors of
# the difference of the means, each run's variance taken as the larger of the spread seen
# across seeds and the binomial variance of 360 validation images.
export DIGITS_SEEDS="${DIGITS_SEEDS:-1 2 3 4}"
# DIGITS_DIR (default the bundle's PNG digits) is the image folder, DIGITS_SERVICE_ARGS more
# data service flags.
digits_run() {  # digits_run NAME [TRAINER FLAGS...]: one run per seed of DIGITS_SEEDS
  local seed digits="${DIGITS_DIR:-$bundle/digits}"
  for seed in $DIGITS_SEEDS; do
    "$stoker" launcher --np=1 --dataset=imagefolder --train_dir="$digits/train" \
      --val_dir="$digits/val" --data_threads=4 --seed="$seed" \
      ${DIGITS_SERVICE_ARGS:+"--data_service_args=$DIGITS_SERVICE_ARGS"} -- --model=resnet18 --num_classes=10 \
      --image_size=32 --batch_size=64 --epochs=30 --optimizer=sgd --lr=0.05 --nesterov \
      --weight_decay=5e-4 --no_decay_bn_bias --lr_schedule=cosine --warmup_epochs=1 --val_every=10 \
      --precision=bf16 --log_every=100 --metrics_jsonl="$out/digits_$1_seed$seed.jsonl" "${@:2}" || return 1
  done
}
# The same digits as baseline JPEGs (the bundle's digits_jpeg): decoded by the data service's
# fast path (--gpu_decode_share=0), three quarters of each batch by the GPU's nvJPEG
# (--gpu_decode_share=0.75, training and validation), and by the exact path
# (--jpeg_decode=exact, Pillow's pixels): the same accuracy, by the test above.
digits_jpeg_run() {  # digits_jpeg_run NAME SERVICE_ARGS [TRAINER FLAGS...]
  DIGITS_DIR="$bundle/digits_jpeg" DIGITS_SERVICE_ARGS="$2" digits_run "$1" "${@:3}"
}
digits_compare() {  # digits_compare [REFERENCE NAME...]: each NAME against REFERENCE (default: plain against fused)
  python3 - "$out" "$(find "$bundle/digits/val" -type f | wc -l)" "${*:-fused plain}" $DIGITS_SEEDS <<'PY'
import json, math, statistics, sys
out, val_files, names, seeds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
runs = {}
for name in names:
    runs[name] = []
    for seed in seeds:
        val = [r for r in map(json.loads, open(f"{out}/digits_{name}_seed{seed}.jsonl")) if r["type"] == "val"]
        last = val[-1]
        assert last["samples"] == val_files, f"{name} seed {seed}: {last['samples']} samples counted, {val_files} files"
        print(f"{name} seed {seed}: validation top-1 {100 * last['top1']:.2f}% on {last['samples']} samples "
              f"after epoch {last['epoch']}; by epoch: " + ", ".join(f"{100 * r['top1']:.1f}%" for r in val))
        runs[name].append(last["top1"])
mean = {name: statistics.fmean(a) for name, a in runs.items()}
spread = {name: statistics.stdev(a) if len(a) > 1 else 0.0 for name, a in runs.items()}
variance = {name: max(spread[name] ** 2, mean[name] * (1 - mean[name]) / val_files) for name in runs}
print(f"{'top-1 %':<16}" + "".join(f"{'seed ' + s:>9}" for s in seeds) + f"{'mean':>9}{'spread':>9}")
for name in runs:
    print(f"{name:<16}" + "".join(f"{100 * a:9.2f}" for a in runs[name]) + f"{100 * mean[name]:9.2f}{100 * spread[name]:9.2f}")
reference, failures = names[0], []
for name in names[1:]:
    se = math.sqrt((variance[reference] + variance[name]) / len(seeds))
    gap = mean[reference] - mean[name]
    print(f"{reference} - {name}: {100 * gap:+.2f} points; standard error of the difference {100 * se:.2f} points")
    if abs(gap) > 3 * se:
        failures.append(f"{reference} and {name} differ by {100 * abs(gap):.2f} points, over three standard errors")
assert min(min(a) for a in runs.values()) >= 0.85, "a run below 85%"
assert not failures, "; ".join(failures)
print("the same accuracy: every gap is within three standard errors")
PY
}
# torchvision's ResNet-18, exported by tools/export_model.py for the runs above.
export_resnet18() {  # export_resnet18 CLASSES SIZE OUT
  python3 "$bundle/bin/export_model.py" torchvision.models:resnet18 --num_classes "$1" \
    --image_size "$2" --seed 5 --out "$3"
}
# Transformers and layer-norm networks from torchvision, exported at 128x128 for 100
# classes, side by side (each export is a few CPU minutes).
export_transformers() {
  local arch pids=()
  for arch in vit_b_16 convnext_tiny swin_v2_t; do
    local kwargs='{}'
    [[ $arch == vit_b_16 ]] && kwargs='{"image_size": 128}'
    python3 "$bundle/bin/export_model.py" "torchvision.models:$arch" --num_classes 100 --image_size 128 \
      --seed 5 --kwargs "$kwargs" --out "$out/exported_$arch.pt2" >"$out/export_$arch.txt" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  tail -n 3 "$out"/export_*.txt
  return "$failed"
}
# --precision=fp8 (Note [FP8 linear layers], trainer/nn/fp8_linear.h) on the exported
# ViT-B/16: 100 steps of varied batches (AdamW), and the same run in bf16.
fp8_run() {  # fp8_run NAME PRECISION
  "$stoker" launcher --np=1 --dataset=synthetic --synthetic_samples=6400 --synthetic_classes=100 --seed=5 -- \
    --model="$out/exported_vit_b_16.pt2" --num_classes=100 --image_size=128 --batch_size=64 --epochs=1 \
    --optimizer=adamw --lr=5e-4 --precision="$2" --loss_log="$out/loss_$1.txt" --log_every=20
}
# The FP8 run's loss tracks the bf16 run's: every 5-step mean within 5% of bf16's over the
# 100 steps; prints both curves (means of 10 steps) and the worst gaps.
fp8_compare() {  # fp8_compare BF16_NAME FP8_NAME
  python3 - "$out" "$1" "$2" <<'PY'
import sys
out, reference, name = sys.argv[1:]
def losses(p): return [float(l.split()[2]) for l in open(f"{out}/loss_{p}.txt")]
def means(x, n): return [sum(x[i:i + n]) / n for i in range(0, len(x) - n + 1, n)]
def gaps(a, b): return [abs(x - y) / max(abs(y), 1e-3) for x, y in zip(a, b)]
ref, got = losses(reference), losses(name)
print(f"{reference} 10-step means: {['%.3f' % x for x in means(ref, 10)]}")
print(f"{name} 10-step means: {['%.3f' % x for x in means(got, 10)]}")
window, step = gaps(means(got, 5), means(ref, 5)), gaps(got, ref)
print(f"worst 5-step-mean gap {max(window):.3f} (window {window.index(max(window)) + 1} of {len(window)}); "
      f"mean gap {sum(window) / len(window):.3f}; worst single step {max(step):.3f}")
assert len(got) == 100 and len(ref) == 100, f"steps: {len(got)} and {len(ref)}, expected 100"
assert max(window) < 0.05, f"{name} left {reference} by {max(window):.3f} (5-step means)"
assert sum(got[-10:]) < sum(got[:10]), f"{name} loss did not fall"
PY
}

# --precision=fp8 resumed from a checkpoint continues bit for bit (Note [FP8 scaling state in
# checkpoints], trainer/nn/fp8_state.h): the exported ViT-B/16 trained 40 deterministic steps
# straight (an asynchronous checkpoint every 10 steps, taken while training goes on), and
# the same run stopped after 20 steps and resumed from its checkpoint. Requires the losses
# bit for bit, the step-20 checkpoints of both runs and their final checkpoints equal entry
# for entry (the FP8 scaling state of every layer among them), and prints the compared
# values. A second straight run first shows that the run itself is deterministic, so that a
# difference can only come from the resume. Skipped below compute capability 8.9.
fp8_resume_run() {  # fp8_resume_run NAME [TRAINER FLAGS...]: log in OUT/fp8_resume_NAME.log
  local name="$1"; shift
  "$stoker" launcher --np=1 --dataset=synthetic --synthetic_samples=1280 --synthetic_classes=100 --seed=9 -- \
    --model="$out/exported_vit_b_16.pt2" --num_classes=100 --image_size=128 --batch_size=32 --epochs=1 \
    --optimizer=adamw --lr=5e-4 --precision=fp8 --deterministic --log_every=10 \
    --loss_log="$out/loss_fp8_resume_$name.txt" "$@" > "$out/fp8_resume_$name.log" 2>&1
  local rc=$?
  echo "run $name: exit $rc, $(wc -l < "$out/loss_fp8_resume_$name.txt" 2>/dev/null || echo 0) steps"
  (( rc == 0 || rc == 75 )) || tail -n 20 "$out/fp8_resume_$name.log"
  return "$rc"
}
fp8_resume_bitwise() {
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 2>/dev/null | head -n 1 | tr -d ' ')
  if [[ -z "$cc" ]] || ! awk -v c="$cc" 'BEGIN { exit !(c + 0 >= 8.9) }'; then
    echo "SKIP --precision=fp8 needs compute capability 8.9 or newer; GPU 0 has ${cc:-an unknown one}"
    return 77
  fi
  [[ -f "$out/exported_vit_b_16.pt2" ]] || { echo "no $out/exported_vit_b_16.pt2: check export_transformers made none"; return 1; }
  rm -rf "$out"/fp8_resume_*_ckpt "$out"/loss_fp8_resume_*.txt
  fp8_resume_run whole --checkpoint_dir="$out/fp8_resume_whole_ckpt" --checkpoint_every_steps=10 || return 1
  grep -hE "precision=fp8: in FP8|checkpoint snapshots:" "$out/fp8_resume_whole.log"
  fp8_resume_run again || return 1
  if ! cmp -s "$out/loss_fp8_resume_whole.txt" "$out/loss_fp8_resume_again.txt"; then
    echo "two straight FP8 runs of the same batches differ (first differing line below): the run is not"
    echo "deterministic on this GPU, so a bitwise resume cannot be judged"
    cmp "$out/loss_fp8_resume_whole.txt" "$out/loss_fp8_resume_again.txt"
    return 1
  fi
  echo "two straight runs: losses identical bit for bit (the run is deterministic)"
  fp8_resume_run first --checkpoint_dir="$out/fp8_resume_stopped_ckpt" --stop_after_steps=20
  local rc=$?
  (( rc == 75 )) || { echo "the stopped run exited $rc, expected 75"; return 1; }
  fp8_resume_run rest --checkpoint_dir="$out/fp8_resume_stopped_ckpt" --resume=auto || return 1
  grep -h "FP8 scaling state" "$out/fp8_resume_rest.log" ||
    { echo "the resumed run did not say that it restored the FP8 scaling state"; return 1; }
  python3 - "$out" <<'PY'
import mmap, re, struct, sys
out = sys.argv[1]

def entries(path):
    """A checkpoint's entries (trainer/checkpoint/checkpoint_file.h): name -> (kind, dtype, shape, bytes)."""
    f = open(path, "rb")
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert m[:8] == b"STOKERCK", f"{path}: not a checkpoint"
    count = struct.unpack_from("<I", m, 24)[0]
    at, got = 32, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", m, at); at += 4
        name = m[at:at + n].decode(); at += n
        kind = m[at]; at += 1
        if kind in (1, 2):
            got[name] = (kind, "", (), m[at:at + 8]); at += 8
        elif kind == 3:
            (length,) = struct.unpack_from("<Q", m, at); at += 8
            got[name] = (kind, "", (), m[at:at + length]); at += length
        else:
            d = m[at]; at += 1
            dtype = m[at:at + d].decode(); at += d
            (rank,) = struct.unpack_from("<I", m, at); at += 4
            shape = struct.unpack_from(f"<{rank}q", m, at); at += 8 * rank
            (length,) = struct.unpack_from("<Q", m, at); at += 8
            got[name] = (kind, dtype, shape, m[at:at + length]); at += length
    return got

def floats(entry):
    return struct.unpack(f"<{len(entry[3]) // 4}f", entry[3])

def fp8_summary(label, got):
    names = sorted(n for n in got if n.startswith("fp8/"))
    assert names, f"{label}: no FP8 scaling state in the checkpoint"
    first = got[names[0]]
    rows, cols = first[2]
    values = floats(first)
    history = cols - 3
    print(f"{label}: {len(got)} entries, {len(names)} of FP8 scaling state ({names[0]} ... {names[-1]}, "
          f"each [{rows}, {cols}]: an amax history of {history})")
    for r, role in enumerate(("input", "weight", "output gradient")):
        row = values[r * cols:(r + 1) * cols]
        print(f"  {names[0]} {role}: scale {row[history + 1]!r}, newest amaxes {[float('%.6g' % a) for a in row[:3]]}")
    scales = [v for n in names for r in range(rows) for v in [floats(got[n])[r * cols + history + 1]]]
    assert any(s != 1.0 for s in scales), f"{label}: every FP8 scale is still 1: FP8 did not run"
    return len(names)

def compare(label, a_path, b_path):
    a, b = entries(a_path), entries(b_path)
    layers = fp8_summary(label, a)
    differ = [n for n in sorted(set(a) | set(b)) if n not in a or n not in b or a[n] != b[n]]
    if differ:
        print(f"{label}: {len(differ)} of {len(a)} entries differ: {differ[:12]}")
        for n in differ:
            if n.startswith("fp8/") and n in a and n in b and a[n][2] == b[n][2]:
                gap = max(abs(x - y) for x, y in zip(floats(a[n]), floats(b[n])))
                print(f"  {n}: largest difference {gap!r}")
        return False, layers
    print(f"{label}: all {len(a)} entries identical ({a_path.split('/')[-2]}/{a_path.split('/')[-1]} and "
          f"{b_path.split('/')[-2]}/{b_path.split('/')[-1]})")
    return True, layers

def losses(name):
    return [l.split() for l in open(f"{out}/loss_fp8_resume_{name}.txt")]
whole, first, rest = losses("whole"), losses("first"), losses("rest")
joined = first + rest
print(f"steps: {len(whole)} straight, {len(first)} + {len(rest)} stopped and resumed")
for i in range(17, min(24, len(whole), len(joined))):
    print(f"  step {i + 1}: straight {' '.join(whole[i])} | resumed {' '.join(joined[i])}")
failures = []
if len(whole) != 40 or whole != joined:
    bad = next((i for i, (x, y) in enumerate(zip(whole, joined)) if x != y), min(len(whole), len(joined)))
    failures.append(f"the resumed run's losses differ from the straight run's from step {bad + 1}")
else:
    print("losses identical bit for bit (40 steps, stopped after 20 and resumed)")
ok, layers = compare("step 20", f"{out}/fp8_resume_whole_ckpt/ckpt-000000000020.stoker",
                     f"{out}/fp8_resume_stopped_ckpt/ckpt-000000000020.stoker")
if not ok: failures.append("the step-20 checkpoints differ (asynchronous snapshot against the stop's)")
ok, _ = compare("final", f"{out}/fp8_resume_whole_ckpt/ckpt-000000000040.stoker",
                f"{out}/fp8_resume_stopped_ckpt/ckpt-000000000040.stoker")
if not ok: failures.append("the final checkpoints differ")
note = open(f"{out}/fp8_resume_rest.log").read()
restored = re.search(r"restored the FP8 scaling state of (\d+) of (\d+) layers", note)
if not restored or int(restored.group(1)) != layers or int(restored.group(2)) != layers:
    failures.append(f"the resumed run did not restore all {layers} layers' FP8 scaling state")
assert not failures, "; ".join(failures)
print("the FP8 run resumed from its checkpoint is the uninterrupted run, bit for bit")
PY
  (( $? == 0 )) || return 1
  rm -rf "$out"/fp8_resume_*_ckpt  # a GB each; the comparison above is the evidence
}

# After training on 2 GPUs the parameters are bit-identical on both ranks.
two_gpu_training() {
  rm -f "$out"/params.rank*
  "$stoker" launcher --np=2 --dataset=synthetic --synthetic_samples=2048 --synthetic_classes=10 -- \
    --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 --epochs=2 \
    --final_params_out="$out/params" --log_every=8 &&
  cmp "$out/params.rank0" "$out/params.rank1" && echo "parameters identical on both ranks"
}

# --gpu_decode_share=auto from JPEG (docs/INPUT_SPEED.md): under --deterministic it is the
# fixed 0.375, the GPU decodes deferred samples, and two runs give the same losses bit for
# bit; without it the share adapts (mode adaptive in --metrics_out) and the run completes.
decode_share_run() {  # decode_share_run NAME [TRAINER FLAGS...]
  local data="$out/decode_share_jpegs"
  [[ -d "$data" ]] || python3 - "$data" <<'PY'
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(0)
for c in range(10):
    os.makedirs(os.path.join(sys.argv[1], f"c{c}"), exist_ok=True)
    for i in range(64):
        # Smooth (a gradient and mild noise), so that each JPEG fits a 64 x 64 sample's place.
        y, x = np.mgrid[0:120, 0:160]
        pixels = np.stack([(x + 8 * i) % 160, (y + 5 * c) % 120, (x + y) // 3], -1).astype(np.uint8)
        pixels += rng.integers(0, 8, pixels.shape, dtype=np.uint8)
        pixels[..., c % 3] //= 2
        Image.fromarray(pixels).save(os.path.join(sys.argv[1], f"c{c}", f"{i:03d}.jpg"), quality=90)
PY
  "$stoker" launcher --np=1 --dataset=imagefolder --train_dir="$data" --data_threads=4 --seed=4 -- \
    --model=resnet18 --num_classes=10 --image_size=64 --batch_size=32 --epochs=2 --log_every=5 \
    --loss_log="$out/loss_decode_$1.txt" --metrics_out="$out/decode_$1.json" "${@:2}"
}
# A JPEG that only nvJPEG finds bad (its frame names quantisation table 3, which it does
# not define: the data service's marker walk defers it) among 63 good ones (4 full batches
# of 16 per epoch, all trained), every sample deferred (--gpu_decode_share=1), under the
# data service's bad-data policy (Note [GPU decode failures] in
# data_service/batch_producer.h): with --bad_files=skip the job completes, the service
# counts the file (unusable files 1) and the job's log names it exactly once; with
# --bad_files=fail the job exits 65 (bad data) naming it.
gpu_bad_file() {
  local data="$out/gpu_bad_file_jpegs"
  rm -rf "$data"
  python3 - "$data" <<'PY' || return 1
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
for c in range(2):
    os.makedirs(f"{root}/c{c}", exist_ok=True)
    for i in range(31 if c == 0 else 32):
        y, x = np.mgrid[0:96, 0:128]
        pixels = np.stack([(x + 8 * i) % 128, (y + 5 * c) % 96, (x + y) // 3], -1).astype(np.uint8)
        Image.fromarray(pixels).save(f"{root}/c{c}/{i:03d}.jpg", quality=90)
jpeg = bytearray(open(f"{root}/c0/007.jpg", "rb").read())
sof = jpeg.find(b"\xff\xc0")
assert sof > 0, "no baseline frame header"
jpeg[sof + 4 + 6 + 2] = 3  # the first component's quantisation table: 3, never defined
open(f"{root}/c0/corrupt.jpg", "wb").write(jpeg)
PY
  local launch=(--np=1 --dataset=imagefolder --train_dir="$data" --data_threads=2 --seed=3)
  local train=(--model=resnet18 --num_classes=2 --image_size=64 --batch_size=16 --epochs=2
    --log_every=4 --gpu_decode_share=1)
  "$stoker" launcher "${launch[@]}" --data_service_args="--bad_files=skip" -- "${train[@]}" \
    > "$out/gpu_bad_file_skip.log" 2>&1 || { tail -n 30 "$out/gpu_bad_file_skip.log"; echo "the skip run failed"; return 1; }
  grep -h "corrupt.jpg\|refused\|unusable files" "$out/gpu_bad_file_skip.log"
  local named
  named=$(grep -c "corrupt.jpg" "$out/gpu_bad_file_skip.log")
  echo "skip: the job's log names corrupt.jpg $named time(s) over 2 epochs"
  (( named == 1 )) || { echo "expected the file named exactly once"; return 1; }
  grep -q "unusable files 1" "$out/gpu_bad_file_skip.log" || { echo "the data service did not count it"; return 1; }
  grep -q "GPU 0 decoded [1-9][0-9]* deferred samples .* 2 refused" "$out/gpu_bad_file_skip.log" ||
    { echo "the trainer did not decode on the GPU and refuse the file in each epoch"; return 1; }
  "$stoker" launcher "${launch[@]}" --data_service_args="--bad_files=fail" -- "${train[@]}" \
    > "$out/gpu_bad_file_fail.log" 2>&1
  local rc=$?
  grep -h "corrupt.jpg" "$out/gpu_bad_file_fail.log" | head -n 5
  echo "fail: exit $rc"
  (( rc == 65 )) || { tail -n 30 "$out/gpu_bad_file_fail.log"; echo "expected exit 65 (bad data)"; return 1; }
  grep -q "corrupt.jpg) (--bad_files=fail" "$out/gpu_bad_file_fail.log" || { echo "the error does not name the file"; return 1; }
}
decode_share_deterministic() {
  decode_share_run det1 --deterministic > "$out/decode_det1.log" 2>&1 || { cat "$out/decode_det1.log"; return 1; }
  decode_share_run det2 --deterministic > "$out/decode_det2.log" 2>&1 || { cat "$out/decode_det2.log"; return 1; }
  grep -h "GPU decode share\|deferred samples" "$out/decode_det1.log" "$out/decode_det2.log"
  grep -q "decoded [1-9][0-9]* deferred samples" "$out/decode_det1.log" || { echo "no sample was decoded on the GPU"; return 1; }
  python3 - "$out/decode_det1.json" <<'PY' || return 1
import json, sys
m = json.load(open(sys.argv[1]))
print(m["gpu_decode_share"], m["gpu_decode_mode"])
assert m["gpu_decode_share"] == 0.375 and m["gpu_decode_mode"] == "fixed", m
PY
  cmp "$out/loss_decode_det1.txt" "$out/loss_decode_det2.txt" && echo "losses identical bit for bit ($(wc -l < "$out/loss_decode_det1.txt") steps)"
}
decode_share_adaptive() {
  decode_share_run adaptive --epochs=6 || return 1
  python3 - "$out/decode_adaptive.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print("share", m["gpu_decode_share"], m["gpu_decode_mode"], "settled" if m["gpu_decode_settled"] else "not settled",
      m["images_per_second"], "images/s")
assert m["gpu_decode_mode"] == "adaptive", m
PY
}

# --gpu_decode_share=auto reaches the best fixed share's throughput quickly
# (Note [Adapting the GPU decode share] in trainer/input/decode_share_controller.h), on
# photo-sized JPEGs (make_jpeg_photos.py: 12,000 of 500x375, made once per OUT) with the
# evaluation transform into 224x224 batches of 256 on 15 decode threads, for a rank that
# only takes batches (--data_only) and for ResNet-18 training: each fixed share 0, 0.25,
# 0.5, 0.75 and 1 (the whole-run images/s of --metrics_out), then auto from the start-up
# ladder (its prior file empty: it writes it), then auto again from the prior it wrote.
# From each auto run's windows (Note [The share's trajectory] in
# trainer/input/share_controlled_feeder.h) the check prints the trajectory and the time
# from the first batch after which the rest of the run trains within 5% of the best fixed
# share's images/s, and asserts it is at most 30 s for both auto runs.
share_photos() {  # prints the folder, made once per OUT
  local data="$out/share_photos"
  if [[ ! -f "$data/.made" ]]; then
    rm -rf "$data"
    python3 "$bundle/bin/make_jpeg_photos.py" "$data" --images 12000 >&2 && touch "$data/.made" || return 1
  fi
  echo "$data"
}
share_run() {  # share_run NAME EPOCHS DATA_ONLY(0|1) [TRAINER FLAGS...]: log in OUT/share_NAME.log
  local name="$1" epochs="$2" data_only="$3" data; shift 3
  data="$(share_photos)" || return 1
  local extra=()
  (( data_only )) && extra=(--data_only)
  "$stoker" launcher --np=1 --dataset=imagefolder --train_dir="$data" --val_dir="$data" --data_threads=15 --seed=1 -- \
    --epochs="$epochs" --data_split=val --model=resnet18 --num_classes=100 --image_size=224 --batch_size=256 \
    --precision=bf16 --optimizer=adamw --lr=1e-3 --warmup_steps=8 --log_every=50 \
    --metrics_out="$out/share_$name.json" "${extra[@]}" "$@" > "$out/share_$name.log" 2>&1 ||
    { tail -n 20 "$out/share_$name.log"; echo "the run $name failed"; return 1; }
  echo "$name: $(python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(m["images_per_second"], "images/s over the whole run, share", m.get("gpu_decode_share"), m.get("gpu_decode_mode"))' "$out/share_$name.json")"
}
decode_share_converges() {  # decode_share_converges KIND(data_only|resnet18) FIXED_EPOCHS AUTO_EPOCHS
  local kind="$1" fixed_epochs="$2" auto_epochs="$3" data_only=0 share
  [[ $kind == data_only ]] && data_only=1
  for share in 0 0.25 0.5 0.75 1; do
    share_run "${kind}_fixed$share" "$fixed_epochs" "$data_only" --gpu_decode_share="$share" || return 1
  done
  local prior="$out/share_priors_$kind.tsv"
  rm -f "$prior"
  share_run "${kind}_auto" "$auto_epochs" "$data_only" --gpu_decode_share=auto \
    --gpu_decode_share_prior="$prior" --log_decode_share_windows || return 1
  share_run "${kind}_auto_prior" "$auto_epochs" "$data_only" --gpu_decode_share=auto \
    --gpu_decode_share_prior="$prior" --log_decode_share_windows || return 1
  grep -h "starting from the prior" "$out/share_${kind}_auto_prior.log" ||
    { echo "the second auto run did not start from the prior in $prior"; return 1; }
  python3 - "$out" "$kind" <<'PY'
import json, re, sys
out, kind = sys.argv[1], sys.argv[2]
fixed = {s: json.load(open(f"{out}/share_{kind}_fixed{s}.json"))["images_per_second"] for s in ("0", "0.25", "0.5", "0.75", "1")}
best_share = max(fixed, key=fixed.get)
best = fixed[best_share]
print("fixed shares, whole-run images/s: " + ", ".join(f"{s}: {v:.0f}" for s, v in fixed.items()) + f"; best {best_share}")
window = re.compile(r"GPU decode share window (\d+): t=([0-9.]+) s images=(\d+) share=([0-9.]+) rate=([0-9]+) images/s "
                    r"over (\d+) batches in ([0-9.]+) s, GPU waits ([0-9]+)%: (.*) -> ([0-9.]+) \(([^)]*)\)")
end = re.compile(r"GPU decode share trajectory: (\d+) images in ([0-9.]+) s from the first batch to the last; ([^;]*);")
failures = []
for run in (f"{kind}_auto", f"{kind}_auto_prior"):
    text = open(f"{out}/share_{run}.log").read()
    windows = [m.groups() for m in window.finditer(text)]
    last = end.search(text)
    metrics = json.load(open(f"{out}/share_{run}.json"))
    if not windows or not last:
        failures.append(f"{run}: no window or trajectory lines in its log")
        continue
    total, seconds = int(last.group(1)), float(last.group(2))
    print(f"\n{run}: {total} images in {seconds:.1f} s from the first batch; {last.group(3)}; "
          f"whole run {metrics['images_per_second']:.0f} images/s = {metrics['images_per_second'] / best:.3f} of the best fixed share's; "
          f"held {metrics.get('gpu_decode_share')}")
    print(f"{'t s':>7} {'share':>6} {'images/s':>9} {'wait':>5} {'rest of run':>11}  decision")
    within = 0.0 if total / seconds >= 0.95 * best else None
    for n, t, images, share, rate, batches, length, wait, decision, nxt, phase in windows:
        t, images = float(t), int(images)
        rest = (total - images) / (seconds - t) if seconds - t > 5 else None
        if within is None and rest is not None and rest >= 0.95 * best:
            within = t
        if decision != "holding" or int(n) % 20 == 0:  # every decision, and every 20th window held
            print(f"{t:7.2f} {float(share):6.3f} {int(rate):9d} {wait:>4}% {('%.0f' % rest) if rest else '-':>11}  {decision} -> {nxt} ({phase})")
    print(f"{run}: within 5% of the best fixed share ({best:.0f} images/s at {best_share}) for the rest of the run "
          + (f"after {within:.1f} s" if within is not None else "never"))
    if seconds < 35:
        failures.append(f"{run}: ran {seconds:.1f} s from its first batch, too short to show 30 s")
    elif within is None or within > 30:
        failures.append(f"{run}: not within 5% of the best fixed share within 30 s")
assert not failures, "; ".join(failures)
print("converged: within 5% of the best fixed share within 30 s, from the ladder and from the prior")
PY
}

# The GPU tests that are scripts (tests/*_test.sh, tag gpu) run in a tree laid out like
# their Bazel runfiles, whose programs are the bundle's (run through bundle/stoker).
runfiles_test() {  # runfiles_test SCRIPT
  local tree="$out/runfiles/stoker" p
  mkdir -p "$tree/launcher" "$tree/trainer" "$tree/data_service" "$tree/tests"
  for p in launcher/launcher trainer/trainer data_service/data_service; do
    printf '#!/usr/bin/env bash\nexec "%s" %s "$@"\n' "$stoker" "${p#*/}" > "$tree/$p"
    chmod +x "$tree/$p"
  done
  cp "$bundle"/bin/tests/*.sh "$tree/tests/"
  TEST_SRCDIR="$out/runfiles" TEST_TMPDIR="$(mktemp -d)" bash "$tree/tests/$1"
}

check() {  # check NAME COMMAND...: runs it (a program or a function below) with its output in OUT/NAME.log
  # CHECK_LIMIT_S=N before it: a limit other than 300 s.
  local name="$1"; shift
  [[ -z "${STOKER_GPU_CHECKS:-}" || "$name" =~ $STOKER_GPU_CHECKS ]] || return 0
  echo "=== $name"
  if timeout --signal=KILL "${CHECK_LIMIT_S:-300}" bash -c "$(declare -f); \"\$@\"" \
      check "$@" >"$out/$name.log" 2>&1; then
    echo "PASS $name"; passed=$((passed + 1))
  else
    local rc=$?
    if (( rc == 77 )); then
      echo "SKIP $name: not run: $(grep -m 1 "^SKIP" "$out/$name.log" || true)"; skipped=$((skipped + 1))
    else
      echo "FAIL $name (exit $rc)"; failed=$((failed + 1)); tail -n 30 "$out/$name.log"
    fi
  fi
}
skip() { echo "SKIP $1: $2"; skipped=$((skipped + 1)); }

echo "GPUs: $gpus"
nvidia-smi -L

check cuda_batch_feeder "$stoker" cuda_batch_feeder_test
grep -E "copies .* ms" "$out/cuda_batch_feeder.log" || true
# A gtest that skips is not a pass: ran_unskipped LOG fails when LOG has a skipped test.
ran_unskipped() { ! grep -q "SKIPPED" "$1"; }
# gtest_check NAME TAG COMMAND...: a GPU gtest binary as check NAME, check NAME_ran that
# none of its tests skipped, and its own "[ TAG ]" lines with the counts.
gtest_check() {
  local name="$1" tag="$2"; shift 2
  check "$name" "$@"
  check "${name}_ran" ran_unskipped "$out/$name.log"
  grep -E "^\[ $tag \]|tests? ran|PASSED|FAILED" "$out/$name.log" 2>/dev/null || true
}
gtest_check cuda_stream_owners device "$stoker" cuda_stream_test

gtest_check gpu_jpeg_decoder hybrid "$stoker" gpu_jpeg_decoder_gpu_test

gtest_check fused_blocks fused "$stoker" fused_blocks_gpu_test
gtest_check self_attention fused "$stoker" self_attention_gpu_test
gtest_check layer_norm fused "$stoker" layer_norm_gpu_test
gtest_check fp8_linear fp8 "$stoker" fp8_linear_gpu_test
gtest_check pointwise_kernel pointwise "$stoker" pointwise_kernel_gpu_test
gtest_check device_timeline trace "$stoker" device_timeline_gpu_test
gtest_check cuda_graphs graphs "$stoker" cuda_graph_gpu_test
gtest_check snapshot_buffers snapshot "$stoker" snapshot_buffers_gpu_test
gtest_check nccl_graph_capture graphs mpirun -np 1 "$stoker" nccl_communicator_test_ranks \
  --gtest_filter='*CapturedInACudaGraph*'
check graphs_bitwise_bf16 graphs_bitwise graphs_bf16
grep -hE "CUDA graphs:|^steps|identical|differ" "$out/graphs_bitwise_bf16.log" || true
check graphs_bitwise_fp16 graphs_bitwise graphs_fp16 --precision=fp16 --accumulate=2 --clip_grad_norm=1 \
  --lr_schedule=cosine --warmup_epochs=0.5 --init_scale=1048576 --growth_interval=3 --growth_factor=4
grep -hE "CUDA graphs:|^steps|identical|differ|skipped" "$out/graphs_bitwise_fp16.log" || true
check precision_fp32_plain precision_run fp32_plain fp32 --nofused_blocks --nocuda_graphs
check precision_fp32_plain_again precision_run fp32_plain_again fp32 --nofused_blocks --nocuda_graphs
check precision_bf16_fused precision_run bf16_fused bf16
check precision_fp16_fused precision_run fp16_fused fp16
check precision_bf16_plain precision_run bf16_plain bf16 --nofused_blocks --nocuda_graphs
check precision_tracks_fp32 precision_compare fp32_plain bf16_fused fp16_fused bf16_plain
cat "$out/precision_tracks_fp32.log"
# --kernel_trace: the profiled steps' kernels, CUDA-graph replays included, in a Chrome trace.
kernel_trace_run() {
  "$stoker" trainer --device=cuda --synthetic_steps=16 --warmup_steps=10 --profile_steps=3 \
    --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 --log_every=8 \
    --kernel_trace="$out/kernel_trace.json" || return 1
  python3 "$bundle/bin/kernel_breakdown.py" "$out/kernel_trace.json" --steps 3 | tee "$out/kernel_trace.txt"
  python3 - "$out/kernel_trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
kernels = [e for e in events if e.get("cat") == "kernel"]
convolutions = [e for e in kernels if "conv" in e["name"].lower() or "sm90" in e["name"].lower()]
print(f"{len(kernels)} kernel records, {len(convolutions)} of convolutions")
assert len(kernels) >= 3 * 40 and convolutions, "the trace lacks the steps' kernels"
PY
}
check kernel_trace kernel_trace_run
check resume_bitwise resume_bitwise
check resume_periodic resume_periodic
grep -E "snapshots|identical|differ|changed" "$out/resume_periodic.log" || true
check decode_share_deterministic decode_share_deterministic
check decode_share_adaptive decode_share_adaptive
check gpu_bad_file gpu_bad_file
cat "$out/gpu_bad_file.log"
grep -E "^steps|identical|differ" "$out/resume_bitwise.log" || true
check digits_fused digits_run fused
check digits_plain digits_run plain --nofused_blocks --nocuda_graphs
check digits_accuracy digits_compare
cat "$out/digits_accuracy.log"
check digits_jpeg_share0 digits_jpeg_run jpeg_share0 "" --gpu_decode_share=0
check digits_jpeg_share075 digits_jpeg_run jpeg_share075 "" --gpu_decode_share=0.75
grep -h "deferred samples" "$out/digits_jpeg_share075.log" | head -n 2 || true
check digits_jpeg_exact digits_jpeg_run jpeg_exact "--jpeg_decode=exact" --gpu_decode_share=0
check digits_jpeg_accuracy digits_compare jpeg_share0 jpeg_share075 jpeg_exact
cat "$out/digits_jpeg_accuracy.log"
CHECK_LIMIT_S=600 check decode_share_converges_data_only decode_share_converges data_only 16 160
cat "$out/decode_share_converges_data_only.log"
CHECK_LIMIT_S=600 check decode_share_converges_resnet18 decode_share_converges resnet18 12 62
cat "$out/decode_share_converges_resnet18.log"
gtest_check pinning_memlock memlock "$stoker" pinning_memlock_test

# The same for a model exported from Python, run by the graph runner (its batch norms and
# max pool as fused blocks, or the plain graph with --nofused_blocks).
check export_resnet18 export_resnet18 100 128 "$out/exported_resnet18.pt2"
check export_resnet18_small export_resnet18 10 64 "$out/exported_resnet18_small.pt2"
export CHECK_MODEL="$out/exported_resnet18.pt2" RESUME_MODEL="$out/exported_resnet18_small.pt2"
check exported_fp32_plain precision_run exported_fp32_plain fp32 --nofused_blocks --nocuda_graphs
check exported_bf16_fused precision_run exported_bf16_fused bf16
check exported_bf16_plain precision_run exported_bf16_plain bf16 --nofused_blocks --nocuda_graphs
check exported_tracks_fp32 precision_compare exported_fp32_plain exported_bf16_fused exported_bf16_plain
cat "$out/exported_tracks_fp32.log"
check exported_resume_bitwise resume_bitwise exported_resume
grep -E "^steps|identical|differ" "$out/exported_resume_bitwise.log" || true
unset CHECK_MODEL RESUME_MODEL

# The transformer rewrites (self-attention, layer norms, matrix products with their
# epilogues) in bf16 track the fp32 plain graph of the same model over the same batches.
check export_transformers export_transformers
for arch in vit_b_16 convnext_tiny swin_v2_t; do
  export CHECK_MODEL="$out/exported_$arch.pt2"
  check "${arch}_fp32_plain" precision_run "${arch}_fp32_plain" fp32 --optimizer=adamw --lr=5e-4 \
    --nofused_blocks --nocuda_graphs
  check "${arch}_bf16_fused" precision_run "${arch}_bf16_fused" bf16 --optimizer=adamw --lr=5e-4
  check "${arch}_tracks_fp32" precision_compare "${arch}_fp32_plain" "${arch}_bf16_fused"
  cat "$out/${arch}_tracks_fp32.log"
done
unset CHECK_MODEL
check vit_b_16_bf16_100 fp8_run vit_b_16_bf16_100 bf16
check vit_b_16_fp8 fp8_run vit_b_16_fp8 fp8
grep -E "precision=fp8: in FP8" "$out/vit_b_16_fp8.log" | head -n 1
check vit_b_16_fp8_tracks_bf16 fp8_compare vit_b_16_bf16_100 vit_b_16_fp8
cat "$out/vit_b_16_fp8_tracks_bf16.log"
CHECK_LIMIT_S=900 check vit_b_16_fp8_resume_bitwise fp8_resume_bitwise
cat "$out/vit_b_16_fp8_resume_bitwise.log"

if (( gpus >= 2 )); then
  check nccl_allreduce mpirun -np 2 "$stoker" nccl_communicator_test_ranks
  check nccl_conformance mpirun -np 2 "$stoker" nccl_communicator_conformance_test_ranks
  check two_gpu_params_identical two_gpu_training
  # A stalled and a killed rank: each job ends in bounded time, leaves nothing and holds
  # no GPU memory after.
  check stalled_rank_ends_job runfiles_test fault_gpu_stall_test.sh
  grep -E "^== |collective watchdog|exited with code|nothing of job|GPU memory" "$out/stalled_rank_ends_job.log" | head -n 12
else
  skip nccl_allreduce "needs 2 GPUs"
  skip nccl_conformance "needs 2 GPUs"
  skip two_gpu_params_identical "needs 2 GPUs"
  skip stalled_rank_ends_job "needs 2 GPUs"
fi
echo "$passed passed, $failed failed, $skipped skipped"
(( failed == 0 ))
