"""The diff run: ``python -m session diff`` on two 3,000-turn sessions, against validating both.

    python3 bench/diff.py            # 3,000 turns, version 2: about a minute
    python3 bench/diff.py --turns 300

Both sessions are ``growth.py``'s conversation (a context that grows by about 2 KB a turn,
one model call and one tool call per turn), recorded twice in format version 2: the same
conversation, so ``diff`` reads and compares every call of both (exit 0).  "validate" is
``session.main(["validate", A, B])``, "diff" ``session.main(["diff", A, B])``,
each in this process with its output thrown away, in CPU seconds (``time.process_time``,
so that other work on the machine counts less); the ratio is the median of interleaved
pairs.  "diff peak" is the peak resident memory of a process of its own that imports
``session`` and runs the diff (Linux: ``VmHWM`` after ``5`` is written to
``/proc/self/clear_refs``; elsewhere ``ru_maxrss``, which includes start-up).  Standard
library only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import growth  # noqa: E402 - after the path above
import measure  # noqa: E402

import session  # noqa: E402


def cpu(argv: List[str]) -> float:
    with open(os.devnull, "w", encoding="utf-8") as devnull, contextlib.redirect_stdout(devnull):
        start = time.process_time()
        status = session.main(argv)
        elapsed = time.process_time() - start
    if status != 0:
        raise RuntimeError(f"{argv}: exit status {status}")
    return elapsed


def peak_kb(a: Path, b: Path) -> int:
    work = 'import session\nstatus = session.main(["diff", sys.argv[2], sys.argv[3], "--json"])\n'
    work += 'assert status == 0, f"diff in its own process: exit status {status}"'
    return measure.peak_kb(work, str(a), str(b))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    script = growth.conversation(args.turns)
    with tempfile.TemporaryDirectory() as folder:
        a, b = Path(folder, "a.jsonl"), Path(folder, "b.jsonl")
        for path in (a, b):
            growth.record(path, 2, script)
        validates, diffs, ratios = [], [], []
        for _ in range(args.pairs):
            validates.append(cpu(["validate", str(a), str(b)]))
            diffs.append(cpu(["diff", str(a), str(b)]))
            ratios.append(diffs[-1] / validates[-1])
        peak = peak_kb(a, b)
        size = a.stat().st_size + b.stat().st_size
    print("| turns | both files | validate both (CPU) | diff (CPU) | diff/validate | diff peak |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.turns:,} | {size / (1 << 20):.1f} MB | {statistics.median(validates):.2f} s"
        f" | {statistics.median(diffs):.2f} s | {statistics.median(ratios):.1f}x | {peak / 1024:.0f} MB |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
