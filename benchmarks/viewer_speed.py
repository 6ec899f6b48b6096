"""Benchmark: how fast the viewer answers on a large stored run (512 tasks x 20 attempts = 10,240).

It starts the viewer as a user does (`launch.py stage=view runs=[RUN] view.port=0`), waits for the
URL it prints, then times the first request of the attempts page (the cold one: the run's rows are
read from its store then), and afterwards other pages, each once: the next attempts page, the
failures filter, a task-id search, the runs page (its headline bootstraps every domain), one
episode, and the judge filter (which reads every record once). It prints seconds per request and
the load average; it asserts nothing (a measurement, not a test; the machine is shared).

Make the run once, cheaply (a seeded stochastic reference policy: no model, ~4 min on 1 core here):

    python launch.py stage=eval tasks=bench eval.attempts=20 policy._target_=tests.stages.coin.CoinPolicy \
        policy.name=coin eval.workers=1 logger=none out_root=/tmp/viewer-bench
    python benchmarks/viewer_speed.py /tmp/viewer-bench/eval-bench-coin-*
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def start_viewer(run_dir: str) -> tuple[subprocess.Popen, str, float]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), "stage=view", f"runs=[{run_dir}]",
                             "view.port=0", "logger=none"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT)
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise SystemExit(f"the viewer did not start: {line}{proc.stdout.read()}")
    return proc, line.split(" at ")[1].split(";")[0], time.perf_counter() - started


def timed(client: httpx.Client, url: str) -> tuple[float, int, int]:
    started = time.perf_counter()
    response = client.get(url)
    return time.perf_counter() - started, response.status_code, len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a stored eval run folder")
    args = parser.parse_args()
    proc, url, listen_s = start_viewer(args.run_dir)
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            print(f"viewer listening {listen_s:.2f} s after launch; load average {os.getloadavg()[0]:.2f}")
            first_s, status, size = timed(client, "/run/0/attempts")
            count = client.get("/run/0/attempts").text.split('id="count">')[1].split("<")[0]
            print(f"attempts page 1 (first request, cold): {first_s:.3f} s  (HTTP {status}, {size:,} bytes; {count})")
            print(f"  = {listen_s + first_s:.2f} s from launch to the first page")
            for label, path in (("attempts page 2", "/run/0/attempts?page=2"),
                                ("failures filter", "/run/0/attempts?outcome=failure"),
                                ("task-id search", "/run/0/attempts?search=travel/rebook"),
                                ("runs page (headline)", "/"),
                                ("one episode", "/run/0/episode?task=travel/rebook_flight/s0-00&attempt=3"),
                                ("judge filter (reads every record once)", "/run/0/attempts?judge=failed"),
                                ("judge filter again", "/run/0/attempts?judge=passed")):
                seconds, status, size = timed(client, path)
                print(f"{label}: {seconds:.3f} s  (HTTP {status}, {size:,} bytes)")
            print(f"load average after {os.getloadavg()[0]:.2f}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
