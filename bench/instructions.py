"""Instructions per call of the writer's hot paths, counted by ``valgrind --tool=cachegrind``.

    python3 bench/instructions.py                     # about 3 minutes
    python3 bench/instructions.py --against OLD_DIR   # the same for OLD_DIR's session.py, and
                                                      # each of its figures beside this one's

Seconds on a shared machine move by a fifth from run to run; instruction counts move by less
than a percent.  Each figure is ``(I(2n) - I(n)) / n``: the instructions of a process that
makes the call 2n times less those of one that makes it n times (everything else alike,
start-up and warming up included), per call.  The floors are ``bench/run.py``'s tuned floor:
the line ``record`` writes, as a dict, encoded by the C encoder ``json.dumps`` uses inside,
built once, and written with one ``os.write``.  ``summarize`` is counted per line of a file
of small records, as ``bench/run.py`` writes them, against the bare ``for line in f:
json.loads(line)`` over the same file: a call is a pass over the file, 1 for each 200 calls
of the record cases.  Standard library and valgrind only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GOALS = {
    "built": ("floor small", 2.1),
    "small": ("floor small", 2.1),
    "medium": ("floor medium", 1.6),
    "summarize": ("bare loop", 1.7),
}
CASES = {
    "event": "building the small Event alone",
    "floor small": "the tuned floor of the small line",
    "small": "record small, its Event built once",
    "built": "record small, its Event built each time",
    "floor medium": "the tuned floor of the medium line",
    "medium": "record medium (a message_end)",
    "bare loop": "the bare loop over a file of small records, per line",
    "summarize": "summarize of that file, per line",
}
READS = {"bare loop", "summarize"}  # a call: a pass over a file of READ_BYTES
READ_BYTES = 512 << 10  # of small records, as bench/run.py writes them: about 1,300 lines
PASSES = 200  # the record cases' calls per pass of a reading case


def child(case: str, n: int, folder: str) -> None:
    """Make the call of *case* *n* times, after the set-up every count of it shares."""
    import measure  # the project's folder, or --against's, is first on sys.path

    import session

    built = measure.events()
    path = os.path.join(folder, f"{os.getpid()}.jsonl")
    small = Path(path + ".small")
    if case in READS:
        measure.write_session(small, READ_BYTES, sizes=("small",))
    print(small.read_bytes().count(b"\n") if case in READS else 1)
    with session.create(path) as s, s.begin_run() as run:
        for size in ("small", "medium"):
            run.record(built[size])
        lines = {
            size: json.loads(line)
            for size, line in zip(("small", "medium"), Path(path).read_bytes().splitlines()[-2:])
        }
        encoder = measure.tuned_encoder()
        fd = os.open(path + ".floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        calls: Dict[str, Callable[[], object]] = {
            "event": measure.small_event,
            "floor small": lambda: os.write(fd, ("".join(encoder(lines["small"], 0)) + "\n").encode()),
            "small": lambda: run.record(built["small"]),
            "built": lambda: run.record(measure.small_event()),
            "floor medium": lambda: os.write(fd, ("".join(encoder(lines["medium"], 0)) + "\n").encode()),
            "medium": lambda: run.record(built["medium"]),
            "bare loop": lambda: measure.bare_loop(small),
            "summarize": lambda: session.summarize(small),
        }
        call = calls[case]
        for _ in range(3):  # the interpreter specializes a call on its first runs
            call()
        for _ in range(n):
            call()
        os.close(fd)


def instructions(source: Path, case: str, n: int, folder: str) -> Tuple[int, int]:
    """What cachegrind counts of a child process making *case*'s call *n* times, and the
    lines of the file a reading case reads (1 for a record case)."""
    child = [
        sys.executable,
        str(Path(__file__)),
        "--child",
        case,
        "--count",
        str(n),
        "--source",
        str(source),
        "--folder",
        folder,
    ]
    # bytecode cached apart (compiling session.py would be most of the count, and vary)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": os.path.join(folder, "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(child, env=env, stdout=subprocess.DEVNULL, check=True)  # fills the cache
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *child]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no count from cachegrind: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", "")), int(done.stdout)


def per_call(source: Path, case: str, n: int) -> float:
    """Per call of a record case; per line of the file of a reading case."""
    if case in READS:
        n = max(1, n // PASSES)
    with tempfile.TemporaryDirectory(prefix="instructions-") as folder:
        (more, lines), (fewer, _) = (
            instructions(source, case, 2 * n, folder),
            instructions(source, case, n, folder),
        )
        return (more - fewer) / n / lines


def report(counts: Dict[str, float], label: str) -> List[str]:
    rows = []
    for case, what in CASES.items():
        row = f"{label}{what}: {counts[case] / 1000:.1f} k instructions"
        if case in GOALS:
            floor, bound = GOALS[case]
            ratio = counts[case] / counts[floor]
            met = "met" if ratio <= bound else "NOT met"
            row += f", {ratio:.2f}x the {floor} [goal <= {bound:g}x: {met}]"
        rows.append(row)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--against", type=Path, help="a folder holding another session.py to count as well")
    parser.add_argument("--count", type=int, default=1000, help="calls of the shorter process (default 1000)")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(args.source))
        child(args.child, args.count, args.folder)
        return 0
    if shutil.which("valgrind") is None:
        parser.error("needs valgrind")
    print(
        f"Python {sys.version.split()[0]}; instructions per call, (I(2n) - I(n)) / n, n = {args.count}",
        flush=True,
    )
    sources = [("", ROOT)] + ([(f"{args.against}: ", args.against)] if args.against else [])
    for label, source in sources:
        counts = {case: per_call(source, case, args.count) for case in CASES}
        for row in report(counts, label):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
