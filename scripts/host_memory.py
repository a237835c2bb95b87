"""A `jury run`'s resident host memory over its judgments, in one place for
scripts/gpu-check, scripts/bench-judge-memory, scripts/bench-long-run and
scripts/compare-judge-runs.py: run a
command while sampling the process's resident memory and how many judgments its cache
file holds, and summarise the samples. Standard library only.

As a program, runs a command and writes the samples as CSV (seconds, judgments done,
resident kB), exiting with the command's status:
  scripts/host_memory.py CSV CACHE_FILE COMMAND...
"""
import csv
import os
import signal
import subprocess
import sys
import time


def judged(cache):
    """How many judgments the cache file holds (0 before it exists)."""
    return sum(1 for _ in open(cache)) if os.path.exists(cache) else 0


def run_sampled(cmd, cache, interval=0.2, kill_at=None, **popen):
    """Runs `cmd` to its end, sampling every `interval` seconds, or kills it with SIGKILL
    once the cache holds `kill_at` judgments; returns (exit status, [(seconds, judgments
    done, resident kB)]), the status -9 when it was killed."""
    start = time.time()
    p = subprocess.Popen(cmd, **popen)
    samples = []
    while p.poll() is None:
        try:
            rss = next(int(l.split()[1]) for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS"))
            done = judged(cache)
            samples.append((time.time() - start, done, rss))
            if kill_at is not None and done >= kill_at:
                p.send_signal(signal.SIGKILL)
                p.wait()
                break
        except (OSError, StopIteration):
            pass
        time.sleep(interval)
    return p.returncode, samples


def summary(samples):
    """(kB after the first judgment, kB at the last, kB per judgment over the second half
    of the judgments) of (seconds, done, kB) samples, or None before any judgment."""
    judged = [(done, rss) for _, done, rss in samples if done >= 1]
    if not judged:
        return None
    first, last = judged[0], max(judged)
    half = next(s for s in judged if s[0] >= last[0] // 2)
    return first[1], last[1], (last[1] - half[1]) / max(1, last[0] - half[0]), last[0]


def read(path):
    """The samples of a CSV written by this program."""
    with open(path) as f:
        return [(float(r[0]), int(r[1]), int(r[2])) for r in csv.reader(f) if len(r) == 3]


if __name__ == "__main__":
    csv_path, cache, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    status, samples = run_sampled(cmd, cache)
    with open(csv_path, "w", newline="") as f:
        csv.writer(f).writerows((f"{t:.2f}", done, rss) for t, done, rss in samples)
    sys.exit(status)
