"""What ``export`` costs against ``validate``, and ``summary FILE...``
against one interpreter start per file, over a directory of sessions built here.

    python3 bench/export.py             # 400 sessions, about 350 MB, under a temporary folder
    python3 bench/export.py --scale 4   # four times the sessions (and the bytes)

The corpus is what a real directory holds: sessions from 6 KB to 6 MB, some with an
unfinished tail, a NUL run or garbage.  Every figure is a ratio of two commands run on the
same files in the same run, each the median of interleaved repetitions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import session  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "


def write_session(path: Path, calls: int, rng: random.Random) -> None:
    """A session of *calls* model calls (2 KB each, with usage) and tool calls (200 B, one in
    eight 32 KB)."""
    model, tool = session.Execution("m", "model"), session.Execution("t", "tool", parent_id="m")
    with session.create(path) as s, s.begin_run() as run:
        for n in range(calls):
            usage = session.Usage(input=rng.randrange(9000), output=rng.randrange(900))
            message = session.Message("assistant", [session.text_block(TEXT * 22)], "toolUse", usage)
            run.record(session.Event("model_exec_end", timestamp=T0, execution=model, message=message))
            output = TEXT * (2 if n % 8 else 380)
            run.record(
                session.Event("tool_exec_end", timestamp=T0, execution=tool, tool="read", result=output)
            )


def build_corpus(folder: Path, files: int, seed: int = 1) -> int:
    """*files* sessions, log-uniformly 6 KB to 6 MB, one in ten damaged; their total bytes."""
    rng = random.Random(seed)
    total = 0
    for n in range(files):
        path = folder / f"session-{n:05d}.jsonl"
        write_session(path, int(10 ** rng.uniform(0, 3)), rng)
        damage = rng.random()
        if damage < 0.07:  # a crash mid-line
            with open(path, "ab") as f:
                f.write(b'{"session_id":"' + b"x" * rng.randrange(5000))
        elif damage < 0.10:  # a power cut: a NUL run, or garbage, over a line
            blob = bytearray(path.read_bytes())
            at = blob.index(b"\n", len(blob) // 2) + 1
            blob[at : at + 400] = (b"\x00" if damage < 0.085 else b"#") * 400
            path.write_bytes(bytes(blob))
        total += path.stat().st_size
    return total


# the export, its fsyncs made no-ops: what the copy costs, without waiting for the disk
UNSYNCED = "import os, sys, session; os.fsync = lambda fd: None; sys.exit(session.main(sys.argv[1:]))"


def command(*args: str, synced: bool = True) -> float:
    """Seconds to run ``python -m session ARGS``, output discarded."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *(["-m", "session"] if synced else ["-c", UNSYNCED]), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def interleaved(runs: int, *works: Callable[[], float]) -> List[float]:
    """The median seconds of each of *works*, run in turn *runs* times."""
    times: List[List[float]] = [[] for _ in works]
    for i in range(runs):
        order = range(len(works)) if i % 2 == 0 else reversed(range(len(works)))
        for k in order:
            times[k].append(works[k]())
    return [statistics.median(t) for t in times]


def one_per_file(files: List[str]) -> float:
    start = time.perf_counter()
    for name in files:
        command("summary", name)
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="corpus size, 1 = 400 sessions")
    parser.add_argument("--runs", type=int, default=5, help="repetitions of each command")
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "sessions"
        corpus.mkdir()
        size = build_corpus(corpus, max(2, int(400 * args.scale)))
        files = sorted(str(path) for path in corpus.iterdir())
        print(f"corpus: {len(files)} sessions, {size / 1e6:.0f} MB", flush=True)
        out = Path(scratch) / "export.jsonl"
        export_args = ("export", str(corpus), "-o", str(out))
        validate, export, unsynced = interleaved(
            args.runs,
            lambda: command("validate", *files),
            lambda: command(*export_args),
            lambda: command(*export_args, synced=False),
        )
        print(f"validate: {validate:.2f} s, {size / 1e6 / validate:.0f} MB/s")
        print(f"export: {export:.2f} s, {export / validate:.2f}x validate")
        print(f"export without its fsyncs: {unsynced:.2f} s, {unsynced / validate:.2f}x validate")
        sample = files[:: max(1, len(files) // 100)]  # a hundred interpreter starts are plenty
        (together,) = interleaved(args.runs, lambda: command("summary", *sample))
        apart = one_per_file(sample)
        print(
            f"summary of {len(sample)} files: one process {together:.2f} s, "
            f"one per file {apart:.2f} s ({apart / together:.1f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
