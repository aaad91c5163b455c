#!/usr/bin/env python3
"""The soak run's memory record (tools/soak.sh), in two steps:

    plot_soak.py sample --job JOB --loss_log FILE --out soak_samples.csv [--interval 1]
        Every INTERVAL seconds until no process of the job is left: the resident memory
        (VmRSS of /proc/PID/status) of the job's data service and of each trainer rank, and
        the bytes that the job's /dev/shm/stoker.JOB.* segments occupy, with the epoch that
        rank 0's loss log has reached.
    plot_soak.py report soak_samples.csv --csv soak.csv --png soak.png [--max_growth 0.05]
        One row per epoch (the largest sample of each series within it) to soak.csv, the
        chart to soak.png, first/last/max per process on stdout, and the verdict: every
        series must grow by less than MAX_GROWTH from the end of epoch 2 (after warm-up) to
        its largest value after it; exit 1 otherwise.

Processes are found by their command line naming the job and told apart by their program
(data_service, trainer) and, for trainers, by OMPI_COMM_WORLD_RANK in their environment."""

import argparse
import csv
import os
import sys
import time


def job_processes(job):
    """{series name: pid} of the job's data services and trainers now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            exe = os.path.basename(argv[0].decode(errors="replace"))
            if job.encode() not in b" ".join(argv[1:]):
                continue
            if exe == "data_service":
                found.setdefault("data_service", entry)
            elif exe == "trainer":
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                rank = env.get(b"OMPI_COMM_WORLD_RANK", b"?").decode()
                found[f"trainer{rank}"] = entry
        except (OSError, ValueError):
            continue
    return found


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def shm_bytes(job):
    total = 0
    prefix = f"stoker.{job}."
    for name in os.listdir("/dev/shm"):
        if name.startswith(prefix):
            try:
                total += os.stat(os.path.join("/dev/shm", name)).st_blocks * 512
            except OSError:
                pass
    return total


def current_epoch(loss_log):
    """The epoch of the last complete line of rank 0's loss log (-1 before the first)."""
    try:
        with open(loss_log, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            lines = f.read().split(b"\n")[:-1]
        return int(lines[-1].split()[0]) if lines else -1
    except (OSError, ValueError, IndexError):
        return -1


def sample(args):
    start = time.monotonic()
    seen_any = False
    names = ["data_service", "trainer0", "trainer1"]
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seconds", "epoch", "shm_bytes"] + [f"{n}_rss_kib" for n in names])
        idle_since = None
        while True:
            procs = job_processes(args.job)
            for n in procs:
                if n not in names:
                    names.append(n)  # more ranks than 2: their columns are appended
            if procs:
                seen_any, idle_since = True, None
                row = [f"{time.monotonic() - start:.1f}", current_epoch(args.loss_log),
                       shm_bytes(args.job)]
                row += [rss_kib(procs[n]) if n in procs else "" for n in names]
                w.writerow(row)
                f.flush()
            else:
                idle_since = idle_since or time.monotonic()
                if seen_any and time.monotonic() - idle_since > 3:
                    break
                if not seen_any and time.monotonic() - start > args.start_timeout:
                    sys.exit(f"no process of job {args.job} appeared within {args.start_timeout} s")
            time.sleep(args.interval)


def report(args):
    with open(args.samples) as f:
        rows = list(csv.DictReader(f))
    series = [k for k in rows[0] if k.endswith("_rss_kib")] + ["shm_bytes"]
    per_epoch = {}
    for r in rows:
        e = int(r["epoch"])
        if e < 0:
            continue
        slot = per_epoch.setdefault(e, {})
        for s in series:
            if r.get(s):
                slot[s] = max(slot.get(s, 0), int(r[s]))
    epochs = sorted(per_epoch)
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epoch"] + series)
        for e in epochs:
            w.writerow([e] + [per_epoch[e].get(s, "") for s in series])

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for s in series[:-1]:
        xs = [e for e in epochs if s in per_epoch[e]]
        top.plot(xs, [per_epoch[e][s] / 1024 for e in xs], marker=".", label=s[:-len("_rss_kib")])
    top.set_ylabel("resident memory (MiB, max per epoch)")
    top.set_ylim(bottom=0)
    top.legend()
    top.grid(alpha=0.3)
    xs = [e for e in epochs if "shm_bytes" in per_epoch[e]]
    bottom.plot(xs, [per_epoch[e]["shm_bytes"] / 2**20 for e in xs], marker=".", color="C3")
    bottom.set_ylabel("/dev/shm of the job (MiB)")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("epoch")
    bottom.grid(alpha=0.3)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)

    ok = True
    baseline_epoch = 2
    print(f"{'series':<16}{'first':>12}{'epoch 2':>12}{'last':>12}{'max':>12}{'growth':>10}")
    for s in series:
        values = [(e, per_epoch[e][s]) for e in epochs if s in per_epoch[e]]
        if not values:
            continue
        unit = 1024 if s.endswith("_kib") else 2**20
        base = dict(values).get(baseline_epoch)
        later = [v for e, v in values if e > baseline_epoch]
        growth = (max(later) - base) / base if base and later else float("nan")
        flat = base is not None and later and growth < args.max_growth
        ok = ok and bool(flat)
        name = s.replace("_rss_kib", " RSS").replace("shm_bytes", "/dev/shm")
        print(f"{name:<16}{values[0][1] / unit:>10.1f}Mi{(base or 0) / unit:>10.1f}Mi"
              f"{values[-1][1] / unit:>10.1f}Mi{max(v for _, v in values) / unit:>10.1f}Mi"
              f"{growth * 100:>9.2f}%  {'flat' if flat else 'GROWS'}")
    print(f"epochs {epochs[0]}..{epochs[-1]}, {len(rows)} samples; growth = largest value "
          f"after epoch {baseline_epoch} over the epoch-{baseline_epoch} value, limit "
          f"{args.max_growth * 100:.0f}%")
    print("VERDICT: flat" if ok else "VERDICT: memory grows")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("sample")
    p.add_argument("--job", required=True)
    p.add_argument("--loss_log", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--start_timeout", type=float, default=120.0)
    p = sub.add_parser("report")
    p.add_argument("samples")
    p.add_argument("--csv", required=True)
    p.add_argument("--png", required=True)
    p.add_argument("--max_growth", type=float, default=0.05)
    p.add_argument("--title", default="Stoker soak: resident memory and /dev/shm per epoch")
    args = parser.parse_args()
    if args.command == "sample":
        sample(args)
        return 0
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
