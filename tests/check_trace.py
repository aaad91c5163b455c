#!/usr/bin/env python3
"""Checks a merged Stoker trace (launcher trace merge) against the trace-event format.

Every event has the fields its phase needs; complete events (X) and begin/end pairs (B/E)
nest on each thread; every flow (s/f) has both ends, each inside a slice of its thread, and
ends no earlier than it starts on the merged clock (give or take the clock error the merge
recorded); every process is named. Each gradient bucket's reduction pairs up: its "issued" instant, its
host slice from that instant (inside a backward slice of its thread), issued in bucket order
within each reducing step ("round") and the same buckets in every round of every rank, and,
on a GPU, its interval on the communicator's stream, which starts no earlier than it was
issued and does not overlap the one before. Optionally: the ranks and data services expected, with
events from each.

  check_trace.py job_trace.json --ranks=3 --data_services=2
"""
import argparse
import collections
import json
import sys

PHASES = {"X", "B", "E", "i", "I", "s", "t", "f", "C", "M"}


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def check_fields(event, index):
    where = "event %d (%s)" % (index, json.dumps(event)[:160])
    if not isinstance(event, dict):
        fail(where + ": not an object")
    ph = event.get("ph")
    if ph not in PHASES:
        fail(where + ": unknown phase %r" % ph)
    for key, kind in (("pid", int), ("tid", int), ("name", str)):
        if not isinstance(event.get(key), kind):
            fail(where + ": %s missing or not %s" % (key, kind.__name__))
    if ph == "M":
        if not isinstance(event.get("args"), dict):
            fail(where + ": metadata without args")
        return
    ts = event.get("ts")
    if not isinstance(ts, (int, float)) or ts < 0:
        fail(where + ": ts missing or negative")
    if ph == "X" and (not isinstance(event.get("dur"), (int, float)) or event["dur"] < 0):
        fail(where + ": complete event without a non-negative dur")
    if ph in ("i", "I") and event.get("s", "t") not in ("t", "p", "g"):
        fail(where + ": instant event of unknown scope")
    if ph in ("s", "t", "f") and "id" not in event:
        fail(where + ": flow event without id")
    if ph == "C":
        args = event.get("args")
        if not isinstance(args, dict) or not all(isinstance(v, (int, float)) for v in args.values()):
            fail(where + ": counter without numeric args")
    if "args" in event and not isinstance(event["args"], dict):
        fail(where + ": args is not an object")


def check_nesting(events):
    """X slices and B/E pairs of one thread nest; returns the slices by thread."""
    slices = collections.defaultdict(list)
    open_b = collections.defaultdict(list)
    for event in sorted((e for e in events if e["ph"] in ("B", "E")), key=lambda e: e["ts"]):
        key = (event["pid"], event["tid"])
        if event["ph"] == "B":
            open_b[key].append(event)
        else:
            if not open_b[key]:
                fail("an E event without its B on pid %d tid %d at %s" % (key + (event["ts"],)))
            begin = open_b[key].pop()
            slices[key].append((begin["ts"], event["ts"], begin["name"]))
    for key, stack in open_b.items():
        if stack:
            fail("B event %r without its E on pid %d tid %d" % ((stack[-1]["name"],) + key))
    for event in events:
        if event["ph"] == "X":
            slices[(event["pid"], event["tid"])].append(
                (event["ts"], event["ts"] + event["dur"], event["name"]))
    for key, spans in slices.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for start, end, name in spans:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                fail("on pid %d tid %d, %r [%s, %s] overlaps %r [%s, %s] without nesting" %
                     (key + (name, start, end) + (stack[-1][2], stack[-1][0], stack[-1][1])))
            stack.append((start, end, name))
    return slices


def enclosed(slices, event):
    for start, end, _ in slices.get((event["pid"], event["tid"]), []):
        if start <= event["ts"] <= end:
            return True
    return False


def check_flows(events, slices, tolerance_us):
    flows = collections.defaultdict(dict)
    for event in events:
        if event["ph"] in ("s", "f"):
            key = (event.get("cat", ""), event["name"], event["id"])
            if event["ph"] in flows[key]:
                fail("flow %r has two %r events" % (key, event["ph"]))
            flows[key][event["ph"]] = event
    late = []
    for key, ends in flows.items():
        if set(ends) != {"s", "f"}:
            fail("flow %r is not paired: only %s" % (key, sorted(ends)))
        for ph in ("s", "f"):
            if not enclosed(slices, ends[ph]):
                fail("flow %r: its %r end is in no slice of its thread" % (key, ph))
        lag = ends["f"]["ts"] - ends["s"]["ts"]
        if lag < -tolerance_us:
            late.append((key, lag))
    if late:
        fail("%d flow(s) received before they were sent on the merged clock (tolerance %d us), "
             "e.g. %r by %d us" % (len(late), tolerance_us, late[0][0], -late[0][1]))
    return flows


def check_buckets(events, slices):
    """Each rank's bucket reductions: issued, host slice, GPU interval; returns counts."""
    by_pid = collections.defaultdict(lambda: {"issued": {}, "host": {}, "gpu": {}})
    for event in events:
        name = event.get("name", "")
        if not name.startswith("bucket "):
            continue
        args = event.get("args", {})
        if "bucket" not in args or "round" not in args:
            fail("bucket event %r without its bucket and round: %s" % (name, json.dumps(event)[:160]))
        key = (args["round"], args["bucket"])
        if event["ph"] in ("i", "I") and name.endswith(" issued"):
            kind = "issued"
        elif event["ph"] == "X" and name.endswith(" reduction"):
            kind = "host"
        elif event["ph"] == "X" and name.endswith(" all-reduce") and event.get("cat") == "gpu":
            kind = "gpu"
        else:
            fail("unknown bucket event %r (%s)" % (name, event["ph"]))
        if name.split()[1] != str(args["bucket"]):
            fail("%r carries bucket %s" % (name, args["bucket"]))
        seen = by_pid[event["pid"]][kind]
        if key in seen:
            fail("rank %d: two %s events of bucket %d in round %d" %
                 (event["pid"], kind, key[1], key[0]))
        seen[key] = event
    counts = {"ranks": 0, "reductions": 0, "gpu": 0}
    buckets_per_round = None
    for pid, kinds in sorted(by_pid.items()):
        issued, host, gpu = kinds["issued"], kinds["host"], kinds["gpu"]
        if set(issued) != set(host):
            fail("rank %d: buckets issued %s but reduced %s" %
                 (pid, sorted(set(issued) - set(host)), sorted(set(host) - set(issued))))
        if not set(gpu) <= set(issued):
            fail("rank %d: GPU intervals of buckets never issued: %s" % (pid, sorted(set(gpu) - set(issued))))
        rounds = collections.defaultdict(list)
        for (rnd, bucket), event in issued.items():
            rounds[rnd].append((bucket, event))
            reduction = host[(rnd, bucket)]
            if reduction["ts"] != event["ts"] or reduction["tid"] != event["tid"]:
                fail("rank %d: bucket %d of round %d: its reduction does not start where it was issued"
                     % (pid, bucket, rnd))
            backward = [s for s in slices.get((pid, event["tid"]), [])
                        if s[2] == "backward" and s[0] <= reduction["ts"] and
                        reduction["ts"] + reduction["dur"] <= s[1]]
            if not backward:
                fail("rank %d: bucket %d of round %d is reduced outside backward" % (pid, bucket, rnd))
            interval = gpu.get((rnd, bucket))
            if interval is not None:
                slack = max(200, interval["args"].get("anchor_error_us", 0) * 2)
                if interval["ts"] < event["ts"] - slack:
                    fail("rank %d: bucket %d of round %d ran on the GPU %d us before it was issued"
                         % (pid, bucket, rnd, event["ts"] - interval["ts"]))
        for rnd, issued_in_round in rounds.items():
            issued_in_round.sort(key=lambda b: b[0])
            order = [b for b, _ in issued_in_round]
            if order != list(range(len(order))):
                fail("rank %d: round %d reduced buckets %s, not 0..n-1" % (pid, rnd, order))
            times = [e["ts"] for _, e in issued_in_round]
            if times != sorted(times):
                fail("rank %d: round %d issued its buckets out of order" % (pid, rnd))
            if buckets_per_round is None:
                buckets_per_round = len(order)
            elif buckets_per_round != len(order):
                fail("rank %d: round %d reduced %d buckets, another %d" %
                     (pid, rnd, len(order), buckets_per_round))
        counts["ranks"] += 1
        counts["reductions"] += len(host)
        counts["gpu"] += len(gpu)
    return counts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--data_services", type=int, default=0)
    parser.add_argument("--min_bucket_reductions", type=int, default=0,
                        help="fail unless at least this many bucket reductions are traced")
    args = parser.parse_args()
    with open(args.trace) as f:
        trace = json.load(f)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail("no traceEvents list")
    events = trace["traceEvents"]
    for i, event in enumerate(events):
        check_fields(event, i)
    tolerance = int(trace.get("stoker", {}).get("max_clock_error_us", 0))
    slices = check_nesting(events)
    flows = check_flows(events, slices, tolerance)
    buckets = check_buckets(events, slices)

    if buckets["reductions"] < args.min_bucket_reductions:
        fail("%d bucket reductions traced, expected at least %d" %
             (buckets["reductions"], args.min_bucket_reductions))
    named = {e["pid"]: e["args"].get("name") for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    with_events = collections.Counter(e["pid"] for e in events if e["ph"] != "M")
    for pid in with_events:
        if not named.get(pid):
            fail("process %d has events but no process_name" % pid)
    ranks = sorted(pid for pid in with_events if pid < 1000000)
    services = sorted(pid for pid in with_events if pid >= 1000000)
    if args.ranks and ranks != list(range(args.ranks)):
        fail("events from ranks %s, expected 0..%d" % (ranks, args.ranks - 1))
    if args.data_services and len(services) != args.data_services:
        fail("events from %d data service(s), expected %d" % (len(services), args.data_services))
    kinds = collections.Counter(key[1] for key in flows)
    print("trace OK: %d events, %d processes (%s), flows %s, clock tolerance %d us, "
          "bucket reductions %d on %d rank(s) (%d timed on the GPU)" %
          (len(events), len(with_events), ", ".join(named[p] for p in sorted(with_events)),
           dict(kinds), tolerance, buckets["reductions"], buckets["ranks"], buckets["gpu"]))


if __name__ == "__main__":
    main()
