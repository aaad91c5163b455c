#!/usr/bin/env python3
"""Stoker against the Python recipes on the GPU host, side by side in one run.

Runs from the bundle (tools/bundle.sh) on a host with torch, torchvision and 1 or 2 GPUs,
phase by phase, usually through `bundle/bin/gpu.sh bench OUT PHASE...`:
    python3 bundle/bin/bench_gpu.py --phase data_service --out OUT   # the data service alone
    python3 bundle/bin/bench_gpu.py --phase one_gpu --out OUT
    python3 bundle/bin/bench_gpu.py --phase step --out OUT       # the step against torch.compile
    python3 bundle/bin/bench_gpu.py --phase exported --out OUT   # torch.export models (own OUT)
    python3 bundle/bin/bench_gpu.py --phase models --models vit_b_16:128 --out OUT  # vs torch.compile
    python3 bundle/bin/bench_gpu.py --phase two_gpu --out OUT
    python3 bundle/bin/bench_gpu.py --phase hybrid --out OUT     # GPU JPEG decode: fixed shares, auto, chart
    python3 bundle/bin/bench_gpu.py --phase packed --out OUT     # the pre-resized packed format
    python3 bundle/bin/bench_gpu.py --phase checkpoint --out OUT # step time with checkpoints vs none
    python3 bundle/bin/bench_gpu.py --phase report --out OUT   # ratios, JSON, PNG chart
Each phase appends JSON lines to OUT/bench.jsonl. One-GPU phases are pinned to 16 cores
(what a one-GPU H200 machine has) with taskset, for both Stoker and the recipes.
The anchor scripts (../shared/bench, copied into bundle/anchors) generate the dataset:
12,000 JPEGs of 500x375 (1 GPU) or 24,000 (2 GPUs) in 100 class folders.
Every phase that prints a training figure from JPEG also runs the data service alone into
a rank that only takes batches (--data_only) DATA_ONLY_REPS times, and records the
median with its spread (min, max) beside it.
"""
import argparse, json, os, re, resource, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE = os.path.dirname(HERE)
STOKER = os.path.join(BUNDLE, "stoker")
ANCHORS = os.path.join(BUNDLE, "anchors")
CORES_1GPU = "0-15"
BUNDLE_LIBS = {"LD_LIBRARY_PATH": os.path.join(BUNDLE, "lib")}  # for the programs without torch


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def record(out, **kw):
    kw["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(os.path.join(out, "bench.jsonl"), "a") as f:
        f.write(json.dumps(kw) + "\n")
    log(json.dumps(kw))
    return kw


WORK = "/tmp/stoker_bench_runs"
DATA_ONLY_REPS = 3
SYNTHETIC_STEPS = 100  # 92 timed after 8 warm-up steps; JPEG runs take 2 epochs (~90 steps)
LOG = None  # OUT/bench.log: every command's whole output


def run(cmd, env=None, timeout=900, cores=None):
    if cores:
        cmd = ["taskset", "-c", cores] + cmd
    log("$ " + " ".join(cmd))
    e = dict(os.environ, NCCL_NVLS_ENABLE="0", OMPI_ALLOW_RUN_AS_ROOT="1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
    e.update(env or {})
    p = subprocess.run(cmd, env=e, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if LOG:
        with open(LOG, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{p.stdout}\n[exit {p.returncode}]\n\n")
    tail = "\n".join(p.stdout.splitlines()[-15:])
    if p.returncode != 0:
        log(f"exit {p.returncode}:\n{tail}")
    else:
        log(tail)
    return p


def dataset(images):
    root = f"/tmp/stoker_bench_{images}/train"
    if not os.path.isdir(root):
        sys.path.insert(0, ANCHORS)
        import anchor_seed
        t = time.time()
        anchor_seed.make_data(root, 100, images // 100)
        log(f"made {images} JPEGs in {time.time() - t:.0f} s")
    return root


def children_cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def stoker_train(out, name, ranks, model, root=None, synthetic_steps=0, data_only=False,
                 cores=None, data_threads=15, epochs=2, extra=(), batch=256, service_args="",
                 dataset_kind="imagefolder", quiet=False, jsonl=None):
    """Runs one Stoker job and records its images/s (and, for JPEG runs, the CPU cores
    the whole job used per 1,000 images/s: CPU seconds of every process over the run's
    wall time, divided by images/s / 1000). With `jsonl` (a file name in WORK) the run
    writes its progress records there and the row gets their settled_rate. Returns the row."""
    os.makedirs(WORK, exist_ok=True)
    metrics = os.path.join(WORK, f"{name}.json")
    trainer = ["--model=" + model, "--num_classes=1000", "--image_size=224", f"--batch_size={batch}",
               "--precision=bf16", "--optimizer=adamw", "--lr=1e-3", "--weight_decay=1e-4",
               "--warmup_steps=8", "--log_every=10", "--metrics_out=" + metrics, *extra]
    records = os.path.join(WORK, jsonl) if jsonl else None
    if records:
        trainer.append("--metrics_jsonl=" + records)
    if data_only:
        trainer.append("--data_only")
    if synthetic_steps:
        cmd = ["mpirun", "-np", str(ranks), STOKER, "trainer", "--device=cuda",
               f"--synthetic_steps={synthetic_steps}"] + trainer
    else:
        # The recipes train with Resize(256) + CenterCrop(224): the data service's
        # evaluation transform, so the same folder is given as the validation split.
        cmd = [STOKER, "launcher", f"--np={ranks}", f"--dataset={dataset_kind}", "--train_dir=" + root,
               "--val_dir=" + root, f"--data_threads={data_threads}"]
        if service_args:
            cmd.append("--data_service_args=" + service_args)
        cmd += ["--", f"--epochs={epochs}", "--data_split=val"] + trainer
    for stale in (metrics, records):
        if stale and os.path.exists(stale):
            os.remove(stale)
    cpu0, wall0 = children_cpu_seconds(), time.time()
    p = run(cmd, cores=cores)
    cpu, wall = children_cpu_seconds() - cpu0, time.time() - wall0
    row = dict(who="stoker", what=name, ranks=ranks, model=model)
    if service_args:
        row["service_args"] = service_args
    if p.returncode == 0 and os.path.exists(metrics):
        m = json.load(open(metrics))
        peak = re.findall(r"peak ([0-9.]+) GiB of", p.stdout)
        reserved = re.findall(r"peak reserved ([0-9.]+) GiB", p.stdout)
        graphs = re.findall(r"CUDA graphs: ([0-9]+) captured, ([0-9]+) replays", p.stdout)
        if graphs:
            row.update(graphs_captured=int(graphs[-1][0]), graph_replays=int(graphs[-1][1]))
        row.update(peak_gib=float(peak[-1]) if peak else None,
                   peak_reserved_gib=float(reserved[-1]) if reserved else None,
                   **{k: m.get(k) for k in ("images_per_second", "data_wait_share", "gpu_input_wait_share",
                                           "measured_steps")})
        gpu = re.findall(r"decoded ([0-9]+) deferred samples with nvJPEG's (\w+) backend; ([0-9]+) refused "
                         r"and replaced; ([0-9]+) of the decoded", p.stdout)
        if gpu:
            row.update(gpu_decoded=sum(int(g[0]) for g in gpu), nvjpeg_backend=gpu[-1][1],
                       gpu_refused=sum(int(g[2]) for g in gpu), cuda_backend_decodes=sum(int(g[3]) for g in gpu))
        waits = re.findall(r"decode: [0-9]+ batches, [0-9]+ of them re-initialising nvJPEG's batch; ([0-9.]+) ms "
                           r"of host time per batch in nvJPEG", p.stdout)
        if waits:
            row["nvjpeg_host_ms_per_batch"] = float(waits[-1])
        for k in ("gpu_decode_share", "gpu_decode_mode", "gpu_decode_settled"):
            if k in m:
                row[k] = m[k]
        end = re.findall(r"GPU decode share at the end: ([0-9.]+) \(([^)]*)\); the last window at ([0-9.]+): "
                         r"([0-9]+) images/s", p.stdout)
        if end:
            row.update(gpu_decode_phase=end[-1][1], last_window_share=float(end[-1][2]),
                       last_window_images_per_second=float(end[-1][3]))
        writes = re.findall(r"written in the background: ([0-9.]+) MB in ([0-9.]+) s", p.stdout)
        if writes:
            row["checkpoint_write_s"] = [float(w[1]) for w in writes]
        pinned = re.findall(r"checkpoint snapshots: ([0-9.]+) MB of pinned host memory \(pinned in ([0-9.]+) s\)",
                            p.stdout)
        if pinned:
            row.update(snapshot_pinned_mb=float(pinned[-1][0]), snapshot_pin_s=float(pinned[-1][1]))
        row.update(share_trajectory(p.stdout))
        ips = m.get("images_per_second")
        if not synthetic_steps and ips:
            row["cores_per_1000_img_s"] = round(cpu / wall / (ips / 1000.0), 3)
    else:
        row["error"] = p.returncode
    if records:
        row["settled_images_per_second"], row["shares_seen"] = settled_rate(records)
    if quiet:
        return row
    record(out, **row)
    return row


def data_only_repeated(out, name, ranks, root, reps=DATA_ONLY_REPS, **kw):
    """The data service into ranks that only take batches, `reps` times: the median, min and
    max images/s in one row (the data-bound limit beside a training figure)."""
    rows = [stoker_train(out, name, ranks, "resnet18", root=root, data_only=True, quiet=True, **kw)
            for _ in range(reps)]
    values = [r["images_per_second"] for r in rows if r.get("images_per_second")]
    row = dict(rows[-1])
    if values:
        row.update(images_per_second=statistics.median(values), min=min(values), max=max(values),
                   runs=values, spread=round(max(values) - min(values), 1))
    record(out, **row)
    return row


def beside(train_row, data_row):
    """One line: a training figure with the data-only figure (median, min-max) beside it."""
    t = train_row.get("images_per_second")
    d = data_row.get("images_per_second")
    log(f"{train_row.get('what')}: {t} images/s | data only {d} images/s "
        f"(min {data_row.get('min')}, max {data_row.get('max')} over {len(data_row.get('runs', []))} runs)"
        + (f" | training {t / d:.2f} of the data-only rate" if t and d else ""))


def anchor_lines(out, p, who, extra):
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                record(out, who=who, **extra, **json.loads(line))
            except json.JSONDecodeError:
                pass


def phase_data_service(out, threads_list=(16, 15), per_core=True):
    """The data service alone (no trainer) on all 16 cores, evaluation transform, against
    torchvision's loader on the same files and cores; then images/s per core, one thread each."""
    root = dataset(12000)
    for threads in threads_list:
        # Stoker's fast JPEG reconstruction (the default) and its exact one (Pillow's pixels,
        # what torchvision's loader computes), separately.
        for mode in ("fast", "exact"):
            data_service_alone(out, root, threads, f"data_service_alone_{threads}threads"
                               + ("" if mode == "fast" else "_exact"), jpeg_decode=mode)
    # torchvision's loader, in steady state, uint8 output (like with like).
    p = run([sys.executable, os.path.join(HERE, "loader_bench.py"), "--root", root, "--workers", "16"],
            cores=CORES_1GPU, timeout=400)
    anchor_lines(out, p, "python", {"ranks": 0})
    if not per_core:
        return
    # Per core: one thread each, the same 256 files from memory (bench_vs_torchvision.py).
    sample = "/tmp/stoker_bench_percore"
    if not os.path.isdir(sample):
        os.makedirs(sample)
        for c in sorted(os.listdir(root))[:4]:
            for f in sorted(os.listdir(os.path.join(root, c)))[:64]:
                os.symlink(os.path.join(root, c, f), os.path.join(sample, f"{c}_{f}"))
    p = run([sys.executable, os.path.join(HERE, "bench_vs_torchvision.py"), "--benchmark",
             os.path.join(BUNDLE, "bin", "transforms_benchmark"), "--dir", sample, "--dct_scales", "pow2",
             "--compare_huffman"],
            cores="3", timeout=400, env=BUNDLE_LIBS)
    record(out, who="both", what="per_core", lines=p.stdout.strip().splitlines()[-5:])


def data_service_alone(out, root, threads, name, jpeg_decode="fast", share=0.0, dataset_kind="imagefolder",
                       split="val"):
    """data_service_benchmark: the service and one in-process rank that only takes batches.
    Its "ms CPU per image" is also the CPU cores it needs per 1,000 images/s."""
    bench = os.path.join(BUNDLE, "bin", "data_service_benchmark")
    p = run([bench, "--data=" + root, f"--dataset={dataset_kind}", f"--split={split}", f"--threads={threads}",
             "--seconds=15", f"--jpeg_decode={jpeg_decode}", f"--gpu_decode_share={share}"],
            cores=CORES_1GPU, timeout=300, env=BUNDLE_LIBS)
    m = re.search(r"in ([0-9.]+) s: ([0-9]+) images/s", p.stdout)
    cpu = re.search(r"([0-9.]+) ms CPU per image", p.stdout)
    return record(out, who="stoker", what=name, threads=threads, jpeg_decode=jpeg_decode, gpu_decode_share=share,
                  images_per_second=float(m.group(2)) if m else None,
                  cores_per_1000_img_s=float(cpu.group(1)) if cpu else None,
                  line=p.stdout.strip().splitlines()[-1:])


def phase_one_gpu(out, skip_anchor, models=("resnet50", "resnet18"), data_only=True):
    root = dataset(12000)
    trained = []
    for model in models:
        stoker_train(out, f"synthetic_{model}_1gpu", 1, model, synthetic_steps=SYNTHETIC_STEPS, cores=CORES_1GPU)
        trained.append(stoker_train(out, f"jpeg_{model}_1gpu", 1, model, root=root, cores=CORES_1GPU))
    if data_only:
        d = data_only_repeated(out, "data_only_1gpu", 1, root, cores=CORES_1GPU)
        for row in trained:
            beside(row, d)
    if not skip_anchor:
        phase_one_gpu_anchor(out)


def phase_one_gpu_anchor(out):
    root = dataset(12000)
    p = run([sys.executable, os.path.join(ANCHORS, "anchor_seed.py"), "--root", root],
            env={"CUDA_VISIBLE_DEVICES": "0"}, cores=CORES_1GPU, timeout=560)
    anchor_lines(out, p, "python", {"ranks": 1})


def phase_step(out, models=("resnet50", "resnet18"), synthetic_only=False):
    """The training step against torch.compile: Stoker synthetic with the fused blocks and
    CUDA graphs (the default), without the graphs, and on the plain path (neither), Stoker
    from JPEG, the data service alone, and
    ../shared/bench/anchor_peers.py (eager and torch.compile; DALI where installed) in the
    same call. `synthetic_only`: the synthetic runs alone (a quick look at the step)."""
    root = None if synthetic_only else dataset(12000)
    trained = []
    for model in models:
        stoker_train(out, f"synthetic_{model}_1gpu", 1, model, synthetic_steps=SYNTHETIC_STEPS, cores=CORES_1GPU)
        stoker_train(out, f"synthetic_nographs_{model}_1gpu", 1, model, synthetic_steps=SYNTHETIC_STEPS,
                     cores=CORES_1GPU, extra=["--nocuda_graphs"])
        stoker_train(out, f"synthetic_plain_{model}_1gpu", 1, model, synthetic_steps=SYNTHETIC_STEPS,
                     cores=CORES_1GPU, extra=["--nofused_blocks", "--nocuda_graphs"])
        if model == "resnet50":
            stoker_train(out, f"synthetic_fp16_{model}_1gpu", 1, model, synthetic_steps=SYNTHETIC_STEPS,
                         cores=CORES_1GPU, extra=["--precision=fp16"])
        if not synthetic_only:
            trained.append(stoker_train(out, f"jpeg_{model}_1gpu", 1, model, root=root, cores=CORES_1GPU))
    if synthetic_only:
        return
    d = data_only_repeated(out, "data_only_1gpu", 1, root, cores=CORES_1GPU)
    for row in trained:
        beside(row, d)
    p = run([sys.executable, os.path.join(ANCHORS, "anchor_peers.py"), "--root", root,
             "--archs", ",".join(models)], env={"CUDA_VISIBLE_DEVICES": "0"}, cores=CORES_1GPU, timeout=700)
    anchor_lines(out, p, "python", {"ranks": 1})


def phase_exported(out):
    """Models exported from torchvision with tools/export_model.py, trained by Stoker's graph
    runner, against the built-in ResNet-50 (fused blocks on and off) and PyTorch eager
    (anchor_peers.py, no compile) on the same GPU: synthetic batches, bf16, AdamW."""
    for arch, batch in (("resnet50", 256), ("vit_b_16", 128)):
        pt2 = f"/tmp/stoker_export_{arch}.pt2"
        p = run([sys.executable, os.path.join(HERE, "export_model.py"), f"torchvision.models:{arch}",
                 "--num_classes", "1000", "--image_size", "224", "--out", pt2], timeout=300)
        if p.returncode != 0:
            record(out, who="stoker", what=f"export_{arch}", error=p.returncode)
            continue
        stoker_train(out, f"synthetic_exported_{arch}_1gpu", 1, pt2, synthetic_steps=40,
                     cores=CORES_1GPU, batch=batch)
        if arch == "resnet50":
            stoker_train(out, f"synthetic_exported_plain_{arch}_1gpu", 1, pt2, synthetic_steps=40,
                         cores=CORES_1GPU, batch=batch, extra=["--nofused_blocks"])
            stoker_train(out, "synthetic_resnet50_1gpu", 1, arch, synthetic_steps=40, cores=CORES_1GPU)
            stoker_train(out, "synthetic_plain_resnet50_1gpu", 1, arch, synthetic_steps=40,
                         cores=CORES_1GPU, extra=["--nofused_blocks"])
        p = run([sys.executable, os.path.join(ANCHORS, "anchor_peers.py"), "--root", "/tmp", "--archs", arch,
                 "--no_dali", "--no_compile", "--batch", str(batch), "--steps", "20"],
                env={"CUDA_VISIBLE_DEVICES": "0"}, cores=CORES_1GPU, timeout=300)
        anchor_lines(out, p, "python", {"ranks": 1})


def phase_models(out, models, modes, nofused=True, variants=()):
    """Models exported from torchvision (tools/export_model.py, 224x224, 1000 classes) trained
    by Stoker's graph runner, with its fused rewrites (the default) and without
    (--nofused_blocks), against ../shared/bench/anchor_models.py (fused AdamW) in the same
    call: synthetic batches, bf16, channels_last, AdamW. `models`: [(arch, batch)]. Prints
    the table with each model's ratio to its best torch.compile mode and their geometric
    mean (report_models). `variants`: more Stoker runs of each model: "fp8" (--precision=fp8,
    its linear layers in FP8: trainer/nn/fp8_linear.h), recorded as synthetic_exported_fp8_*."""
    os.makedirs(WORK, exist_ok=True)
    exports = {}
    for arch, _ in models:
        pt2 = os.path.join(WORK, f"export_{arch}.pt2")
        cmd = [sys.executable, os.path.join(HERE, "export_model.py"), f"torchvision.models:{arch}",
               "--num_classes", "1000", "--image_size", "224", "--out", pt2]
        log("$ " + " ".join(cmd))
        exports[arch] = (pt2, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for arch, batch in models:
        pt2, p = exports[arch]
        output, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            log(f"export {arch}: exit {p.returncode}\n{output[-2000:]}")
            record(out, who="stoker", what=f"export_{arch}", error=p.returncode)
            continue
        stoker_train(out, f"synthetic_exported_{arch}_1gpu", 1, pt2, synthetic_steps=50,
                     cores=CORES_1GPU, batch=batch)
        if nofused:
            stoker_train(out, f"synthetic_exported_nofused_{arch}_1gpu", 1, pt2, synthetic_steps=50,
                         cores=CORES_1GPU, batch=batch, extra=["--nofused_blocks"])
        if "fp8" in variants:
            stoker_train(out, f"synthetic_exported_fp8_{arch}_1gpu", 1, pt2, synthetic_steps=50,
                         cores=CORES_1GPU, batch=batch, extra=["--precision=fp8"])
    p = run([sys.executable, os.path.join(ANCHORS, "anchor_models.py"), "--models",
             ",".join(f"{a}:{b}" for a, b in models), "--modes", ",".join(modes)],
            env={"CUDA_VISIBLE_DEVICES": "0"}, cores=CORES_1GPU, timeout=1800)
    anchor_lines(out, p, "python", {"ranks": 1})
    report_models(out, read_rows(out), models, modes)


def read_rows(out):
    path = os.path.join(out, "bench.jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def report_models(out, rows, models, modes):
    """The exported models' table (markdown, also OUT/models_table.md): Stoker with and without
    its rewrites, each torch.compile mode measured, and Stoker over the best of them."""
    def stoker(what):
        for r in rows[::-1]:
            if r.get("who") == "stoker" and r.get("what") == what and r.get("images_per_second"):
                return r["images_per_second"]
    def peer(arch, mode):
        for r in rows[::-1]:
            if r.get("who") == "python" and r.get("arch") == arch and r.get("variant") == mode:
                return r.get("img_s")
    head = ["model (batch)", "Stoker", "--nofused_blocks"] + list(modes) + ["Stoker / best compile"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    ratios = []
    fmt = lambda v: "--" if v is None else f"{v:,.0f}"
    for arch, batch in models:
        s = stoker(f"synthetic_exported_{arch}_1gpu")
        compiled = [peer(arch, m) for m in modes if m != "eager" and peer(arch, m)]
        best = max(compiled) if compiled else None
        ratio = s / best if s and best else None
        if ratio:
            ratios.append(ratio)
        lines.append("| " + " | ".join([f"{arch} ({batch})", fmt(s), fmt(stoker(f"synthetic_exported_nofused_{arch}_1gpu"))]
                                       + [fmt(peer(arch, m)) for m in modes]
                                       + ["--" if ratio is None else f"{ratio:.3f}"]) + " |")
    if ratios:
        geomean = 1.0
        for r in ratios:
            geomean *= r
        geomean **= 1.0 / len(ratios)
        lines.append(f"\ngeometric mean of Stoker / best compile over {len(ratios)} models: {geomean:.3f}; "
                     f"lowest {min(ratios):.3f}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "models_table.md"), "w") as f:
        f.write(text + "\n")


CHECKPOINT_EVERY = 50  # default interval; MODEL:BATCH:EVERY sets a model's own


def checkpoint_steps(every):
    """8 warm-up steps, then at least 300 timed ones and at least 3 checkpoints in the window."""
    return 8 + max(300, 3 * every)


def checkpoint_stalls(jsonl_path, warmup, every):
    """The stall (s) of each periodic checkpoint in the timed window (`"type": "checkpoint"`
    lines of --metrics_jsonl), and of the final one."""
    periodic, final = [], None
    if not os.path.exists(jsonl_path):
        return periodic, final
    for line in open(jsonl_path):
        r = json.loads(line)
        if r.get("type") != "checkpoint":
            continue
        if r["global_step"] % every == 0 and r["global_step"] > warmup:
            periodic.append(r)
        else:
            final = r
    return periodic, final


# Models the checkpoint phase exports that torchvision does not name: module:Class and its
# keyword arguments. vit_1b: torchvision's VisionTransformer at 1.0 billion parameters (40
# layers of width 1408, patch 14), 12 GB of checkpoint with AdamW's moments.
CHECKPOINT_EXPORTS = {
    "vit_1b": ("torchvision.models.vision_transformer:VisionTransformer",
               {"image_size": 224, "patch_size": 14, "num_layers": 40, "num_heads": 16,
                "hidden_dim": 1408, "mlp_dim": 6144}),
}


def phase_checkpoint(out, models, modes=("async", "sync")):
    """Checkpoint cost on one GPU: step time with a checkpoint every EVERY steps (models:
    (arch, batch, every) triples),
    asynchronous (--checkpoint_async) and synchronous, against none; synthetic batches, bf16,
    AdamW. The timed images/s leaves each checkpoint's stall out (as every Stoker figure
    does), so the step time with checkpoints adds the stalls of the timed window back:
    (timed seconds + stalls) / timed steps. Prints the stall of each checkpoint."""
    for arch, batch, every in models:
        model = arch
        if arch.startswith("exported_"):
            name = arch[len("exported_"):]
            model = f"/tmp/stoker_export_{name}.pt2"
            if not os.path.exists(model):
                source, kwargs = CHECKPOINT_EXPORTS.get(name, (f"torchvision.models:{name}", None))
                p = run([sys.executable, os.path.join(HERE, "export_model.py"), source,
                         "--num_classes", "1000", "--image_size", "224", "--out", model]
                        + (["--kwargs", json.dumps(kwargs)] if kwargs else []), timeout=600)
                if p.returncode != 0:
                    record(out, who="stoker", what=f"export_{name}", error=p.returncode)
                    continue
        steps = checkpoint_steps(every)
        base = stoker_train(out, f"checkpoint_none_{arch}_1gpu", 1, model, synthetic_steps=steps,
                            cores=CORES_1GPU, batch=batch)
        for mode in modes:
            ckpt = os.path.join(WORK, f"ckpt_{arch}_{mode}")
            subprocess.run(["rm", "-rf", ckpt])
            jsonl = f"checkpoint_{mode}_{arch}.jsonl"
            row = stoker_train(out, f"checkpoint_{mode}_{arch}_1gpu", 1, model, synthetic_steps=steps,
                               cores=CORES_1GPU, batch=batch, jsonl=jsonl, quiet=True,
                               extra=["--checkpoint_dir=" + ckpt, f"--checkpoint_every_steps={every}",
                                      "--checkpoint_every_epochs=0", "--keep_checkpoints=1", "--resume=none",
                                      "--checkpoint_async" if mode == "async" else "--nocheckpoint_async"])
            periodic, final = checkpoint_stalls(os.path.join(WORK, jsonl), 8, every)
            subprocess.run(["rm", "-rf", ckpt])
            ips, steps, ips0 = row.get("images_per_second"), row.get("measured_steps"), base.get("images_per_second")
            if ips and steps and ips0:
                stall = sum(r["stall_s"] for r in periodic)
                step_s = (steps * batch / ips + stall) / steps
                step0_s = batch / ips0
                row.update(checkpoint_every_steps=every, step_ms=round(1000 * step_s, 3), step_ms_without_checkpoints=round(1000 * step0_s, 3),
                           overhead_pct=round(100 * (step_s / step0_s - 1), 3), checkpoints=len(periodic),
                           checkpoint_mb=round(periodic[0]["bytes"] / 1e6, 1) if periodic else None,
                           stall_s=[round(r["stall_s"], 4) for r in periodic],
                           waited_s=[round(r["waited_s"], 4) for r in periodic],
                           max_stall_s=round(max((r["stall_s"] for r in periodic), default=0), 4),
                           first_stall_s=round(periodic[0]["stall_s"], 4) if periodic else None,
                           max_later_stall_s=round(max((r["stall_s"] for r in periodic[1:]), default=0), 4),
                           final_stall_s=round(final["stall_s"], 4) if final else None)
            record(out, **row)
            if "overhead_pct" in row:
                big = (row["checkpoint_mb"] or 0) > 10000
                stall_goal = f"; stall goal < 1 s: {'MET' if row['max_stall_s'] < 1 else 'MISS'}" if big else ""
                writes = row.get("checkpoint_write_s")
                log(f"checkpoint: {'MET ' if row['overhead_pct'] < 1 else 'MISS'} {arch} {mode}: step "
                    f"{row['step_ms']} ms against {row['step_ms_without_checkpoints']} ms without checkpoints "
                    f"= +{row['overhead_pct']}% (goal < 1%); {row['checkpoints']} checkpoints of "
                    f"{row['checkpoint_mb']} MB; stall: first {row['first_stall_s']} s, later max "
                    f"{row['max_later_stall_s']} s, each {row['stall_s']} s (waited for the previous write "
                    f"{row['waited_s']} s){stall_goal}; background writes "
                    f"{writes if writes else 'none (written in the stall)'} s; snapshot memory pinned at "
                    f"start in {row.get('snapshot_pin_s')} s")


def report_exported(rows):
    def stoker(what):
        for r in rows[::-1]:
            if r.get("who") == "stoker" and r.get("what") == what and r.get("images_per_second"):
                return r["images_per_second"]
    def eager(arch):
        for r in rows[::-1]:
            if r.get("who") == "python" and r.get("arch") == arch and r.get("variant") == "bf16_cl_eager":
                return r.get("img_s")
    def show(name, a, b, goal):
        value = a / b if a and b else None
        verdict = "n/a " if value is None else "MET " if value >= goal else "MISS"
        print(f"{verdict} {name}: {a} / {b} = {None if value is None else round(value, 3)} (goal {goal})")
    for arch in ("resnet50", "vit_b_16"):
        show(f"exported {arch} / PyTorch eager", stoker(f"synthetic_exported_{arch}_1gpu"), eager(arch), 1.0)
    exported = stoker("synthetic_exported_resnet50_1gpu")
    plain = stoker("synthetic_exported_plain_resnet50_1gpu")
    show("exported resnet50 / built-in resnet50, fused blocks", exported, stoker("synthetic_resnet50_1gpu"), 0.95)
    show("exported resnet50 / built-in resnet50, plain path", plain, stoker("synthetic_plain_resnet50_1gpu"), 0.95)
    show("exported resnet50, fused blocks / plain graph", exported, plain, 1.0)


def report_step(out, rows):
    """The step targets, from one call's rows (phase_step)."""
    def stoker(what, key="images_per_second"):
        for r in rows[::-1]:
            if r.get("who") == "stoker" and r.get("what") == what and r.get(key) is not None:
                return r[key]
    def peer(what, arch, variant):
        for r in rows[::-1]:
            if r.get("who") == "python" and r.get("what") == what and r.get("arch") == arch and r.get("variant") == variant:
                return r.get("img_s")
    def ratio(a, b):
        return a / b if a and b else None
    lines = []
    def show(name, value, goal=None):
        verdict = "    " if goal is None else "n/a " if value is None else "MET " if value >= goal else "MISS"
        lines.append({"target": name, "ratio": None if value is None else round(value, 3), "goal": goal})
        print(f"{verdict} {name}: {'not measured' if value is None else round(value, 3)}" + (f" (goal {goal})" if goal else ""))
    for model in ("resnet50", "resnet18"):
        s, plain = stoker(f"synthetic_{model}_1gpu"), stoker(f"synthetic_plain_{model}_1gpu")
        nographs = stoker(f"synthetic_nographs_{model}_1gpu")
        j = stoker(f"jpeg_{model}_1gpu")
        compiled = peer("synth", model, "bf16_cl_compile")
        eager = peer("synth", model, "bf16_cl_eager")
        print(f"{model}: Stoker synthetic {s} ({stoker(f'synthetic_{model}_1gpu', 'graphs_captured')} graphs, "
              f"{stoker(f'synthetic_{model}_1gpu', 'graph_replays')} replays), without graphs {nographs}, "
              f"plain {plain}, JPEG {j}; torch.compile {compiled}, eager {eager}")
        show(f"{model} synthetic / torch.compile synthetic", ratio(s, compiled), 1.05)
        show(f"{model} synthetic / PyTorch eager synthetic", ratio(s, eager))
        show(f"{model} synthetic, CUDA graphs / without", ratio(s, nographs))
        if model == "resnet50":
            show(f"{model} synthetic, fp16 with loss scaling / bf16", ratio(stoker(f"synthetic_fp16_{model}_1gpu"), s))
        show(f"{model} synthetic, fused blocks and graphs / plain path", ratio(s, plain))
        show(f"{model} plain path / PyTorch eager synthetic", ratio(plain, eager))
        show(f"{model} from JPEG / own synthetic", ratio(j, s), 0.97 if model == "resnet50" else None)
        dali = peer("train_jpeg", model, "dali_bf16_cl_compile")
        show(f"{model} from JPEG / DALI + torch.compile (this call)", ratio(j, dali), 1.25 if model == "resnet50" else None)
        m, mp = stoker(f"synthetic_{model}_1gpu", "peak_gib"), stoker(f"synthetic_plain_{model}_1gpu", "peak_gib")
        r, rp = (stoker(f"synthetic_{model}_1gpu", "peak_reserved_gib"),
                 stoker(f"synthetic_plain_{model}_1gpu", "peak_reserved_gib"))
        print(f"     {model} peak device memory: allocated {m} GiB, reserved {r} GiB; plain path {mp} / {rp} GiB")
        show(f"{model} peak allocated memory, default / plain", ratio(m, mp))
        show(f"{model} peak reserved memory, default / plain", ratio(r, rp))
    print(f"     data service alone into the trainer (data-only, ResNet-18 geometry): {stoker('data_only_1gpu')} images/s"
          f" (min {stoker('data_only_1gpu', 'min')}, max {stoker('data_only_1gpu', 'max')} over {DATA_ONLY_REPS} runs)")
    return lines


def phase_profile(out):
    """Where a ResNet-50 step's time goes, synthetic against JPEG (--profile_steps): the
    JPEG run's extra time per step, if any, shows up in its phases."""
    root = dataset(12000)
    stoker_train(out, "profile_synthetic_resnet50_1gpu", 1, "resnet50",
                 synthetic_steps=SYNTHETIC_STEPS, cores=CORES_1GPU, extra=["--profile_steps=40"])
    stoker_train(out, "profile_jpeg_resnet50_1gpu", 1, "resnet50", root=root, cores=CORES_1GPU,
                 extra=["--profile_steps=40"])


def phase_two_gpu(out):
    root = dataset(24000)
    trained = []
    for model in ("resnet50", "resnet18"):
        stoker_train(out, f"synthetic_{model}_2gpu", 2, model, synthetic_steps=SYNTHETIC_STEPS)
        trained.append(stoker_train(out, f"jpeg_{model}_2gpu", 2, model, root=root, data_threads=30))
    # What the data service delivers to two ranks that only take batches: the data-bound limit.
    d = data_only_repeated(out, "data_only_2gpu", 2, root, data_threads=30)
    for row in trained:
        beside(row, d)
    p = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
             os.path.join(ANCHORS, "anchor_ddp.py"),
             "--root", root], timeout=400)
    anchor_lines(out, p, "python", {"ranks": 2})


# Runs of about 40 s (12,000 images per epoch): the whole-run figure then includes the
# controller's start-up ladder and refinement, as a real run's first minute does.
AUTO_TRAIN_EPOCHS = 60
AUTO_DATA_ONLY_EPOCHS = 120  # the data-only rank takes ~2x the batches per second
WITHIN = 0.95  # "within 5% of the best fixed share"


def share_trajectory(stdout):
    """From a run with --log_decode_share_windows (Note [The share's trajectory] in
    trainer/input/share_controlled_feeder.h): settled_after_s (from the first batch to the
    controller's first decision to hold), the images and seconds from the first batch to the
    last, and the windows as [t, images so far, share, images/s, decision]."""
    row = {}
    end = re.findall(r"GPU decode share trajectory: ([0-9]+) images in ([0-9.]+) s from the first batch to the "
                     r"last; (?:first settled after ([0-9.]+) s|never settled)", stdout)
    if end:
        row.update(trajectory_images=int(end[-1][0]), trajectory_seconds=float(end[-1][1]),
                   settled_after_s=float(end[-1][2]) if end[-1][2] else None)
    windows = re.findall(r"GPU decode share window [0-9]+: t=([0-9.]+) s images=([0-9]+) share=([0-9.]+) "
                         r"rate=([0-9]+) images/s over [0-9]+ batches in [0-9.]+ s, GPU waits [0-9]+%: (.*) -> "
                         r"[0-9.]+ \(", stdout)
    if windows:
        row["windows"] = [[float(t), int(i), float(sh), int(r), d] for t, i, sh, r, d in windows]
    return row


def within_after_s(row, best):
    """The time from the first batch after which the rest of the run trains at least WITHIN
    of `best` images/s (the best fixed share's), from the run's windows; None if never."""
    total, seconds = row.get("trajectory_images"), row.get("trajectory_seconds")
    if not total or not seconds or not best:
        return None
    if total / seconds >= WITHIN * best:
        return 0.0
    for t, images, _, _, _ in row.get("windows", []):
        if seconds - t > 5 and (total - images) / (seconds - t) >= WITHIN * best:
            return t
    return None


def settled_rate(jsonl):
    """From a run's --metrics_jsonl: the median images/s of the progress windows in the last
    third of the run (after the share has settled, if it did), and the shares seen in order."""
    rows = []
    if os.path.exists(jsonl):
        for line in open(jsonl):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("type") == "train" and r.get("images_per_second"):
                rows.append(r)
    shares = []
    for r in rows:
        if "gpu_decode_share" in r and (not shares or shares[-1] != r["gpu_decode_share"]):
            shares.append(r["gpu_decode_share"])
    tail = rows[len(rows) * 2 // 3:]
    rate = statistics.median(r["images_per_second"] for r in tail) if tail else None
    return rate, shares


def stoker_auto(out, name, root, data_only, reps):
    """`reps` runs of ResNet-18 from JPEG (or a data-only rank) with --gpu_decode_share=auto:
    the share each settled on, its images/s over the whole run and once settled."""
    runs = []
    for i in range(reps):
        # From the start-up ladder every time: no prior from an earlier run.
        r = stoker_train(out, name, 1, "resnet18", root=root, cores=CORES_1GPU, data_only=data_only, quiet=True,
                         epochs=AUTO_DATA_ONLY_EPOCHS if data_only else AUTO_TRAIN_EPOCHS,
                         extra=("--gpu_decode_share=auto", "--gpu_decode_share_prior=none",
                                "--log_decode_share_windows"), jsonl=f"{name}_{i}.jsonl")
        if not r["settled_images_per_second"] and r.get("last_window_share") == r.get("gpu_decode_share"):
            # A data-only rank writes no progress records: its last window at the final share.
            r["settled_images_per_second"] = r.get("last_window_images_per_second")
        runs.append(r)
    # The best fixed share measured into OUT for the same kind of run, if any.
    prefix = "hybrid_data_only_share" if data_only else "hybrid_jpeg_resnet18_share"
    fixed = {w[len(prefix):]: r.get("images_per_second") for w, r in hybrid_rows(out).items()
             if w.startswith(prefix) and r.get("images_per_second")}
    best_share = max(fixed, key=fixed.get) if fixed else None
    best = fixed.get(best_share)
    for r in runs:
        r["within_5pct_after_s"] = within_after_s(r, best)
        if best and r.get("images_per_second"):
            r["whole_run_of_best_fixed"] = round(r["images_per_second"] / best, 3)
    row = dict(runs[-1])
    row.pop("windows", None)
    shares = [r.get("gpu_decode_share") for r in runs]
    settled = [r.get("settled_images_per_second") for r in runs if r.get("settled_images_per_second")]
    whole = [r.get("images_per_second") for r in runs if r.get("images_per_second")]
    row.update(runs=[{k: r.get(k) for k in ("gpu_decode_share", "gpu_decode_settled", "gpu_decode_phase",
                                          "images_per_second", "whole_run_of_best_fixed", "settled_after_s",
                                          "within_5pct_after_s", "settled_images_per_second", "shares_seen",
                                          "windows")}
                     for r in runs],
               settled_shares=shares, best_fixed_share=best_share, best_fixed_images_per_second=best,
               settled_after_s=[r.get("settled_after_s") for r in runs],
               within_5pct_after_s=[r.get("within_5pct_after_s") for r in runs])
    if whole:
        row.update(images_per_second=statistics.median(whole), whole_run_min=min(whole), whole_run_max=max(whole))
    if settled:
        row.update(settled_images_per_second=statistics.median(settled), min=min(settled), max=max(settled))
    record(out, **row)
    return row


def hybrid_rows(out):
    """The latest hybrid rows of OUT/bench.jsonl, by name: the chart draws what every
    invocation of the phase measured into OUT, so the phase may run in parts."""
    path = os.path.join(out, "bench.jsonl")
    rows = [json.loads(line) for line in open(path) if line.strip()] if os.path.exists(path) else []
    return {r["what"]: r for r in rows if r.get("who") == "stoker" and str(r.get("what", "")).startswith("hybrid_")}


def hybrid_chart(out):
    """OUT/hybrid_share.png: images/s against the share, data-only (median, min-max) and
    training, fixed shares as lines, auto as stars: each run's whole-run images/s at the
    share it held at the end."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log(f"no chart: {e}")
        return
    rows = hybrid_rows(out)
    def fixed(prefix):
        points = []
        for what, r in rows.items():
            m = re.fullmatch(prefix + r"([0-9.]+)", what)
            if m and r.get("images_per_second"):
                points.append((float(m.group(1)), r))
        return sorted(points, key=lambda p: p[0])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    data = fixed("hybrid_data_only_share")
    if data:
        x = [s for s, _ in data]
        y = [r["images_per_second"] for _, r in data]
        lo = [y_ - (r.get("min") or y_) for y_, (_, r) in zip(y, data)]
        hi = [(r.get("max") or y_) - y_ for y_, (_, r) in zip(y, data)]
        ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, color="C0", label="data only (median, min-max)")
    train = fixed("hybrid_jpeg_resnet18_share")
    if train:
        ax.plot([s for s, _ in train], [r["images_per_second"] for _, r in train], marker="s", color="C1",
                label="ResNet-18 training")
    for what, label, color in (("hybrid_data_only_auto", "auto, data only (whole run)", "C0"),
                               ("hybrid_jpeg_resnet18_auto", "auto, training (whole run)", "C1")):
        for r in rows.get(what, {}).get("runs", []):
            if r.get("gpu_decode_share") is not None and r.get("images_per_second"):
                ax.plot([r["gpu_decode_share"]], [r["images_per_second"]], marker="*", markersize=15,
                        color=color, markeredgecolor="black", linestyle="none", label=label)
                label = None
    ax.set_xlabel("GPU decode share")
    ax.set_ylabel("images/s (1 H200, 16 cores)")
    ax.set_title("Hybrid JPEG decode: throughput against the share")
    ax.grid(alpha=0.3)
    ax.legend()
    path = os.path.join(out, "hybrid_share.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    log(f"chart: {path}")


def phase_hybrid(out, shares=(0.0, 0.25, 0.5, 0.75, "auto")):
    """Hybrid decode, for each of `shares` (numbers, and "auto"): for a number F, the data
    service alone with --gpu_decode_share F (its CPU cores per 1,000 images/s: the
    benchmark's ms CPU per image), the data service into a data-only rank whose trainer
    asks for F and decodes the deferred samples on its GPU (3 runs), and ResNet-18 from JPEG
    with the trainer's --gpu_decode_share=F; for auto, both with the trainer's
    --gpu_decode_share=auto from the start-up ladder (3 data-only runs, 1 training run, about
    40 s each): their whole-run images/s against the best fixed share's, settled_after_s
    (from the first batch to the controller's first hold) and within_5pct_after_s (after
    which the rest of the run is within 5% of the best fixed share's images/s). All on 16
    cores. Then the chart of everything the phase has measured into OUT (so it may run in
    parts)."""
    root = dataset(12000)
    numbers = [s for s in shares if s != "auto"]
    for share in numbers:
        data_service_alone(out, root, 15, f"hybrid_data_service_alone_share{share}", share=share)
    rows = {}
    for share in numbers:
        # The trainer asks the data service (whose --gpu_decode_share is auto) for the share.
        extra = (f"--gpu_decode_share={share}",)
        d = data_only_repeated(out, f"hybrid_data_only_share{share}", 1, root, cores=CORES_1GPU, extra=extra)
        t = stoker_train(out, f"hybrid_jpeg_resnet18_share{share}", 1, "resnet18", root=root,
                         cores=CORES_1GPU, extra=extra)
        beside(t, d)
        rows[share] = (t, d)
    for share, (t, d) in rows.items():
        log(f"share {share}: ResNet-18 from JPEG {t.get('images_per_second')} images/s "
            f"({t.get('cores_per_1000_img_s')} cores per 1,000 images/s); data only "
            f"{d.get('images_per_second')} (min {d.get('min')}, max {d.get('max')})")
    if "auto" in shares:
        auto_data = stoker_auto(out, "hybrid_data_only_auto", root, data_only=True, reps=DATA_ONLY_REPS)
        auto_train = stoker_auto(out, "hybrid_jpeg_resnet18_auto", root, data_only=False, reps=1)
        for what, row in (("ResNet-18 from JPEG", auto_train), ("data only", auto_data)):
            log(f"auto, {what}: whole run {[r.get('images_per_second') for r in row.get('runs', [])]} images/s "
                f"= {[r.get('whole_run_of_best_fixed') for r in row.get('runs', [])]} of the best fixed share "
                f"({row.get('best_fixed_share')}: {row.get('best_fixed_images_per_second')}); "
                f"settled after {row.get('settled_after_s')} s on {row.get('settled_shares')}; "
                f"within 5% of the best fixed share for the rest of the run after {row.get('within_5pct_after_s')} s; "
                f"{row.get('settled_images_per_second')} images/s once settled")
    measured = hybrid_rows(out)
    record(out, who="stoker", what="summary_hybrid_auto",
           **{f"{kind}_{k}": measured.get(what, {}).get(k)
              for kind, what in (("training", "hybrid_jpeg_resnet18_auto"), ("data_only", "hybrid_data_only_auto"))
              for k in ("images_per_second", "best_fixed_share", "best_fixed_images_per_second", "settled_after_s",
                        "within_5pct_after_s")},
           training_settled_share=measured.get("hybrid_jpeg_resnet18_auto", {}).get("settled_shares"),
           training_settled_images_per_second=measured.get("hybrid_jpeg_resnet18_auto", {}).get(
               "settled_images_per_second"),
           data_only_settled_shares=measured.get("hybrid_data_only_auto", {}).get("settled_shares"),
           data_only_settled_images_per_second=measured.get("hybrid_data_only_auto", {}).get(
               "settled_images_per_second"),
           fixed={w: r.get("images_per_second") for w, r in sorted(measured.items())
                  if "_share" in w and "alone" not in w})
    hybrid_chart(out)


def phase_packed(out, max_short_side=256, quality=90):
    """ResNet-18 from the pre-resized pack (pack_imagefolder --max_short_side) and from the
    images packed as they are, 12 epochs (settled), with the data service alone and data-only."""
    root = dataset(12000)
    pack = os.path.join(BUNDLE, "bin", "pack_imagefolder")
    packs = {}
    for kind, flags in (("packed", []), ("packed_small", [f"--max_short_side={max_short_side}", f"--quality={quality}"])):
        index = f"/tmp/stoker_bench_{kind}/train.stkpack"
        if not os.path.exists(index):
            os.makedirs(os.path.dirname(index), exist_ok=True)
            p = run([pack, "--input=" + root, "--output=" + index] + flags, env=BUNDLE_LIBS, timeout=900)
            record(out, who="stoker", what=f"pack_{kind}", lines=p.stdout.strip().splitlines()[-2:])
        packs[kind] = index
    for kind, index in packs.items():
        data_service_alone(out, index, 15, f"{kind}_data_service_alone", dataset_kind="packed")
        d = data_only_repeated(out, f"{kind}_data_only", 1, index, cores=CORES_1GPU, dataset_kind="packed")
        t = stoker_train(out, f"{kind}_jpeg_resnet18_1gpu", 1, "resnet18", root=index, cores=CORES_1GPU,
                         dataset_kind="packed", epochs=AUTO_TRAIN_EPOCHS, jsonl=f"{kind}_jpeg_resnet18_1gpu.jsonl")
        beside(t, d)


def phase_report(out):
    rows = [json.loads(l) for l in open(os.path.join(out, "bench.jsonl"))]
    def stoker(what):
        for r in rows[::-1]:
            if r.get("who") == "stoker" and r.get("what") == what and "images_per_second" in r:
                return r["images_per_second"]
    def python(**match):
        for r in rows[::-1]:
            if r.get("who") == "python" and all(r.get(k) == v for k, v in match.items()):
                return r.get("img_s") or r.get("img_s_total")
    if any(r.get("what", "").startswith("synthetic_exported_") for r in rows):
        report_exported(rows)
        return
    if any(r.get("what", "").startswith("synthetic_plain_") for r in rows):
        steps = report_step(out, rows)
        json.dump({"stoker": {r["what"]: r.get("images_per_second") for r in rows if r.get("who") == "stoker"},
                   "python": [r for r in rows if r.get("who") == "python"], "step_targets": steps},
                  open(os.path.join(out, "summary_step.json"), "w"), indent=1)
    s50, j50 = stoker("synthetic_resnet50_1gpu"), stoker("jpeg_resnet50_1gpu")
    s18, j18 = stoker("synthetic_resnet18_1gpu"), stoker("jpeg_resnet18_1gpu")
    j50_2, j18_2 = stoker("jpeg_resnet50_2gpu"), stoker("jpeg_resnet18_2gpu")
    targets = []
    def target(name, value, goal):
        ok = value is not None and value >= goal
        targets.append({"target": name, "ratio": None if value is None else round(value, 3), "goal": goal, "met": ok})
    def ratio(a, b):
        return a / b if a and b else None
    target("ResNet-50 JPEG / own synthetic (1 GPU)", ratio(j50, s50), 0.95)
    target("ResNet-18 JPEG / own synthetic (1 GPU)", ratio(j18, s18), 0.90)
    target("ResNet-50 JPEG / article recipe (fp16 NCHW, 8 workers)",
           ratio(j50, python(what="train_jpeg", arch="resnet50", variant="seed_fp16_nchw", workers=8)), 2.5)
    target("ResNet-50 JPEG / best tuned Python (bf16 CL, 15 workers)",
           ratio(j50, python(what="train_jpeg", arch="resnet50", variant="bf16_channels_last", workers=15)), 1.25)
    best18 = max([v for v in (python(what="train_jpeg", arch="resnet18", variant=var, workers=w)
                             for var in ("seed_fp16_nchw", "bf16_channels_last") for w in (8, 15)) if v] or [0]) or None
    target("ResNet-18 JPEG / best Python JPEG figure", ratio(j18, best18), 3.0)
    target("ResNet-50 synthetic / Python bf16 channels_last eager",
           ratio(s50, python(what="synth", arch="resnet50", variant="bf16_channels_last")), 1.0)
    target("ResNet-18 synthetic / Python bf16 channels_last eager",
           ratio(s18, python(what="synth", arch="resnet18", variant="bf16_channels_last")), 1.0)
    target("ResNet-50 JPEG 2 GPUs / 2x 1 GPU", ratio(j50_2, 2 * j50 if j50 else None), 0.95)
    target("ResNet-18 JPEG 2 GPUs / 2x 1 GPU", ratio(j18_2, 2 * j18 if j18 else None), 0.95)
    target("ResNet-50 JPEG 2 GPUs / DDP from JPEG", ratio(j50_2, python(what="train_jpeg_ddp")), 1.0)
    summary = {"stoker": {r["what"]: r.get("images_per_second") for r in rows if r.get("who") == "stoker"},
               "python": [r for r in rows if r.get("who") == "python"], "targets": targets}
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    for t in targets:
        verdict = "n/a " if t["ratio"] is None else "MET " if t["met"] else "MISS"
        print(f"{verdict} {t['target']}: {t['ratio'] if t['ratio'] is not None else 'not measured in this run'} (goal {t['goal']})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels, values, colors = [], [], []
        for what, v in summary["stoker"].items():
            if v:
                labels.append("Stoker " + what); values.append(v); colors.append("tab:orange")
        for r in summary["python"]:
            v = r.get("img_s") or r.get("img_s_total")
            if v and r.get("what") in ("synth", "train_jpeg", "synth_ddp", "train_jpeg_ddp", "loader"):
                labels.append("Python " + " ".join(str(r.get(k)) for k in ("what", "arch", "variant", "workers", "world") if r.get(k) is not None))
                values.append(v); colors.append("tab:blue")
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(labels) + 1))
        ax.barh(range(len(labels)), values, color=colors)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis(); ax.set_xlabel("images/s")
        ax.set_title("Stoker vs the Python recipes, same host, same run")
        fig.tight_layout(); fig.savefig(os.path.join(out, "bench.png"), dpi=110)
    except Exception as e:  # the figures matter more than the chart
        log(f"no chart: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", required=True, choices=["data_service", "one_gpu", "one_gpu_anchor", "step", "exported", "models", "profile", "two_gpu",
                             "hybrid", "packed", "checkpoint", "report"])
    # vit_1b every 200 steps (about 15 s): its 12 GB file takes longer to write than 50 steps.
    ap.add_argument("--checkpoint_models", default="resnet50:256,exported_vit_b_16:128,exported_vit_1b:16:200",
                    help="checkpoint: comma-separated MODEL:BATCH[:EVERY] (a checkpoint every EVERY steps, "
                         f"default {CHECKPOINT_EVERY}), MODEL a built-in model or "
                         "exported_<torchvision name> (exported by tools/export_model.py at 224x224), or "
                         "exported_vit_1b (a 1.0-billion-parameter ViT: 12 GB of checkpoint with AdamW)")
    ap.add_argument("--checkpoint_modes", default="async,sync",
                    help="checkpoint: comma-separated modes to measure against none: async "
                         "(--checkpoint_async), sync")
    ap.add_argument("--gpu_decode_share", default="0,0.25,0.5,0.75,auto",
                    help="hybrid: comma-separated shares to measure (numbers, and auto); the chart "
                         "shows everything measured into --out, so the phase may run in parts")
    ap.add_argument("--models", default="vit_b_16:128,convnext_tiny:256,swin_v2_t:128,efficientnet_b0:256,"
                                          "mobilenet_v3_large:256,resnet50:256",
                    help="models: comma-separated torchvision ARCH:BATCH, exported and trained")
    ap.add_argument("--modes", default="eager,compile,reduce-overhead",
                    help="models: anchor_models.py's modes to run beside Stoker")
    ap.add_argument("--stoker_variants", default="",
                    help="models phase: more Stoker runs per model, comma-separated: fp8 (--precision=fp8)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip_anchor", action="store_true",
                    help="one_gpu: no recipes; step: the synthetic runs alone")
    ap.add_argument("--quick", action="store_true",
                    help="little device time: data_service with 16 threads and no per-core run; "
                         "one_gpu with ResNet-18 only, no data-only run, no recipes")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    global LOG
    LOG = os.path.join(a.out, f"bench_{a.phase}.log")
    if a.phase == "data_service":
        phase_data_service(a.out, (16,) if a.quick else (16, 15), per_core=not a.quick)
    elif a.phase == "one_gpu":
        if a.quick:
            phase_one_gpu(a.out, True, models=("resnet18",), data_only=False)
        else:
            phase_one_gpu(a.out, a.skip_anchor)
    elif a.phase == "one_gpu_anchor":
        phase_one_gpu_anchor(a.out)
    elif a.phase == "step":
        phase_step(a.out, ("resnet18",) if a.quick else ("resnet50", "resnet18"), synthetic_only=a.skip_anchor)
    elif a.phase == "exported":
        phase_exported(a.out)
    elif a.phase == "models":
        phase_models(a.out, [(m.split(":")[0], int(m.split(":")[1])) for m in a.models.split(",") if m],
                     a.modes.split(","), nofused=not a.quick,
                     variants=[v for v in a.stoker_variants.split(",") if v])
    elif a.phase == "profile":
        phase_profile(a.out)
    elif a.phase == "two_gpu":
        phase_two_gpu(a.out)
    elif a.phase == "hybrid":
        phase_hybrid(a.out, tuple(x if x == "auto" else float(x) for x in a.gpu_decode_share.split(",") if x))
    elif a.phase == "packed":
        phase_packed(a.out)
    elif a.phase == "checkpoint":
        models = [m.split(":") for m in a.checkpoint_models.split(",") if m]
        phase_checkpoint(a.out, [(m[0], int(m[1]), int(m[2]) if len(m) > 2 else CHECKPOINT_EVERY) for m in models],
                         modes=[m for m in a.checkpoint_modes.split(",") if m])
    else:
        phase_report(a.out)


if __name__ == "__main__":
    main()
