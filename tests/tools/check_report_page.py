#!/usr/bin/env python3
"""Renders `soma report`'s page in headless Chromium and checks what the browser made of it.

    check_report_page.py EXAMPLE SOMA_PROGRAM WORK_DIR

EXAMPLE writes a memory-history trace (examples/memory_history.cpp: two streams, scopes, an
out-of-memory failure); `soma report` turns it into a page; Chromium loads the page from disk
(no network), runs its script, dumps the DOM and takes a screenshot. The DOM must hold the
rendered charts (a reserved and a used series, a series per stream), the peak with its largest
blocks (scoped "forward") and holes, and the out-of-memory message with its advice. Exits 77
(skipped) when no Chromium is installed.
"""
import os
import re
import shutil
import subprocess
import sys


def fail(message):
    print("check_report_page: FAILED: " + message)
    sys.exit(1)


def run(command, timeout=180):
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        fail(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def main():
    if len(sys.argv) != 4:
        fail("usage: check_report_page.py EXAMPLE SOMA_PROGRAM WORK_DIR")
    example, soma, work = sys.argv[1:]
    browser = chromium()
    if browser is None:
        print("check_report_page: SKIPPED: no chromium (scripts/setup-deps.sh installs it)")
        sys.exit(77)
    os.makedirs(work, exist_ok=True)
    trace = os.path.join(work, "report_trace.json")
    page = os.path.join(work, "report.html")
    shot = os.path.join(work, "report.png")
    run([example, trace])
    print(run([soma, "report", trace, "-o", page]), end="")
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--user-data-dir=" + os.path.join(work, "chromium"),
             "--virtual-time-budget=10000"]
    url = "file://" + os.path.abspath(page)
    dom = run(flags + ["--dump-dom", url])
    if os.path.exists(shot):
        os.remove(shot)
    run(flags + ["--window-size=1200,1900", "--screenshot=" + shot, url])

    if 'data-rendered="yes"' not in dom:
        fail("the page's script did not finish (no data-rendered on body)")
    memory = re.search(r'<svg id="memory-chart".*?</svg>', dom, re.S)
    streams = re.search(r'<svg id="stream-chart".*?</svg>', dom, re.S)
    if not memory or len(re.findall(r'class="series"', memory.group(0))) != 2:
        fail("the memory chart does not hold the reserved and used series")
    if not streams or len(re.findall(r'class="series"', streams.group(0))) < 2:
        fail("the stream chart does not hold a series per stream")
    blocks = re.search(r'<table id="peak-blocks">.*?</table>', dom, re.S)
    holes = re.search(r'<table id="peak-holes">.*?</table>', dom, re.S)
    if not blocks or "forward" not in blocks.group(0):
        fail("the peak's largest blocks are missing or carry no scope")
    if not holes or "<th>bytes</th>" not in holes.group(0):
        fail("the peak's holes table is missing")
    if "reserved/used" not in dom or "fragmentation" not in dom:
        fail("the peak's figures are missing")
    oom = re.search(r'<pre class="oom-message">(.*?)</pre>', dom, re.S)
    if not oom or "What would have let it succeed" not in oom.group(1):
        fail("the out-of-memory failure and its advice are missing")
    with open(shot, "rb") as f:
        png = f.read()
    if not png.startswith(b"\x89PNG") or len(png) < 20000:
        fail(f"the screenshot is missing or blank ({len(png)} bytes)")
    stream_series = len(re.findall(r'class="series"', streams.group(0)))
    print(f"check_report_page: rendered: 2 memory series, {stream_series} stream series, "
          f"peak tables, the out-of-memory advice; screenshot {shot} ({len(png) // 1024} KiB)")


if __name__ == "__main__":
    main()
