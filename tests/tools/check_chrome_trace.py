#!/usr/bin/env python3
"""Runs a program that writes a soma memory-history trace, then checks the file against the
Chrome trace-event format that Perfetto and chrome://tracing read: a JSON object whose
traceEvents is a list of events, each with a name, a phase, a timestamp in microseconds, a pid
and a tid; instant events with a scope of t, p or g; counters with numeric args; metadata naming
processes and threads.

    check_chrome_trace.py PROGRAM TRACE_PATH [EXPECTED_SCOPE ...]
"""
import json
import subprocess
import sys


def fail(message):
    print("check_chrome_trace: " + message)
    sys.exit(1)


def check_event(event, index):
    for key in ("name", "ph", "pid", "tid"):
        if key not in event:
            fail(f"event {index} has no {key}: {event}")
    phase = event["ph"]
    if phase not in ("i", "C", "M"):
        fail(f"event {index}: unexpected phase {phase!r}")
    if phase != "M" and not isinstance(event.get("ts"), (int, float)):
        fail(f"event {index}: ts is not a number: {event}")
    if phase == "i" and event.get("s") not in ("t", "p", "g"):
        fail(f"event {index}: instant event scope {event.get('s')!r}")
    if phase == "C":
        values = event.get("args", {})
        if not values or not all(isinstance(v, (int, float)) for v in values.values()):
            fail(f"event {index}: counter args must be numbers: {event}")
    if phase == "M" and event["name"] not in ("process_name", "thread_name"):
        fail(f"event {index}: unexpected metadata {event['name']!r}")


def main():
    if len(sys.argv) < 3:
        fail("usage: check_chrome_trace.py PROGRAM TRACE_PATH [EXPECTED_SCOPE ...]")
    program, path, scopes = sys.argv[1], sys.argv[2], sys.argv[3:]
    run = subprocess.run([program, path], capture_output=True, text=True, timeout=120)
    sys.stdout.write(run.stdout + run.stderr)
    if run.returncode != 0:
        fail(f"{program} exited with {run.returncode}")
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    events = trace.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail("traceEvents is missing or empty")
    for index, event in enumerate(events):
        check_event(event, index)
    names = [e["name"] for e in events]
    for kind in ("allocate", "free", "grow", "release", "trim"):
        if not any(n.startswith(kind) for n in names):
            fail(f"no {kind} event in the trace")
    seen_scopes = {e.get("args", {}).get("scope") for e in events}
    for scope in scopes:
        if scope not in seen_scopes:
            fail(f"no allocation carries the scope {scope!r}")
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    if len(threads) < 3:
        fail("expected a pools track and a track per stream")
    counters = [e for e in events if e["ph"] == "C"]
    if not counters:
        fail("no reserved/used counters")
    for track in {(e["pid"], e["tid"]) for e in events if e["ph"] == "i"}:
        times = [e["ts"] for e in events if e["ph"] == "i" and (e["pid"], e["tid"]) == track]
        if times != sorted(times):
            fail(f"events of track {track} are out of time order")
    print(f"check_chrome_trace: {len(events)} events, {len(threads)} tracks, "
          f"{len(counters)} counter samples: valid")


if __name__ == "__main__":
    main()
