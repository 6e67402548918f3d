"""What ``--jobs 2`` gains over ``--jobs 1`` for ``validate``, ``summary`` and ``export`` over
a directory of many sessions (``bench/export.py``'s corpus), in wall time and in CPU time.

    python3 bench/jobs.py               # 400 sessions, about 350 MB, under a temporary folder
    python3 bench/jobs.py --runs 9      # more repetitions

Each command runs as a whole process; the two settings alternate, and each figure is the
median of the repetitions.  CPU time is the children's user and system time
(``resource.getrusage``); the load average (``os.getloadavg``) before and after tells how
free the cores were, since a second process gains only where the second core is idle.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export import ROOT, build_corpus


def command(*args: str) -> Tuple[float, float]:
    """Wall and CPU seconds of ``python -m session ARGS``, output discarded."""
    if args[0] == "export":
        Path(args[args.index("-o") + 1]).unlink(missing_ok=True)  # export refuses to replace it
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "session", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="corpus size, 1 = 400 sessions")
    parser.add_argument("--runs", type=int, default=5, help="repetitions of each command")
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "sessions"
        corpus.mkdir()
        size = build_corpus(corpus, max(2, int(400 * args.scale)))
        files = sorted(str(path) for path in corpus.iterdir())
        out = str(Path(scratch) / "export.jsonl")
        print(f"corpus: {len(files)} sessions, {size / 1e6:.0f} MB", flush=True)
        commands = {
            "validate": ("validate", *files),
            "summary": ("summary", *files),
            "export": ("export", str(corpus), "-o", out),
        }
        for name, base in commands.items():
            times: List[List[Tuple[float, float]]] = [[], []]
            for run in range(args.runs):
                for jobs in (1, 2) if run % 2 == 0 else (2, 1):
                    times[jobs - 1].append(command(*base[:1], "--jobs", str(jobs), *base[1:]))
            (wall1, cpu1), (wall2, cpu2) = (
                (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for t in times
            )
            print(
                f"{name}: --jobs 1 {wall1:.2f} s ({cpu1:.2f} s CPU), --jobs 2 {wall2:.2f} s "
                f"({cpu2:.2f} s CPU): {wall1 / wall2:.2f}x as fast, {cpu2 / cpu1:.2f}x the CPU",
                flush=True,
            )
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
