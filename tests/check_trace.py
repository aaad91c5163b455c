#!/usr/bin/env python3
"""Checks a merged Stoker trace (launcher trace merge) against the trace-event format.

Every event has the fields its phase needs; complete events (X) and begin/end pairs (B/E)
nest on each thread; every flow (s/f) has both ends, each inside a slice of its thread, and
ends no earlier than it starts on the merged clock (give or take the clock error the merge
recorded); every process is named. Optionally: the ranks and data services expected, with
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--data_services", type=int, default=0)
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
    print("trace OK: %d events, %d processes (%s), flows %s, clock tolerance %d us" %
          (len(events), len(with_events), ", ".join(named[p] for p in sorted(with_events)),
           dict(kinds), tolerance))


if __name__ == "__main__":
    main()
