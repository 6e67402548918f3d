"""What the readers that need no data (``validate``, ``open``) cost on lines over 1 MiB,
against a bare ``for line in f: json.loads(line)`` loop over the same file.

    python3 bench/long_lines.py            # about a minute
    python3 bench/long_lines.py --runs 9   # more repetitions

Three files of about 24 MiB each, in format version 1 (whose requests hold their messages):
requests of ~1.2 MB made of many small values (a model call's context of short messages,
what an agent writes), requests of ~8 MB of the same, and tool results of one 8 MB string.
Each figure is the median of interleaved pairs of CPU times (``time.process_time``), so
that other work on the machine weighs on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure import goal, median_ratio  # noqa: E402

import session  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = 'The quick brown fox jumps over the lazy dog;\n sphinx of black "quartz", judge my vow. '


def context(size: int) -> List[session.Message]:
    """Messages of about *size* bytes: short user texts, assistant tool calls, tool results."""
    messages: List[session.Message] = []
    total, n = 0, 0
    while total < size:
        if n % 3 == 0:
            message = session.Message("user", [session.text_block(f"{n}: " + TEXT * 2)], timestamp=T0)
        elif n % 3 == 1:
            args = {"path": f"src/{n}.py", "lines": [1, 40]}
            blocks: List[session.ContentBlock] = [
                session.text_block(TEXT),
                session.tool_call_block(f"call-{n}", "read_file", args),
            ]
            message = session.Message("assistant", blocks, "toolUse", {"input": n, "output": 7}, timestamp=T0)
        else:
            meta = {"tool_call_id": f"call-{n - 1}"}
            message = session.Message("tool", [session.text_block(TEXT * 3)], metadata=meta, timestamp=T0)
        messages.append(message)
        total += 300
        n += 1
    return messages


def requests_file(path: Path, line: int, total: int) -> None:
    """Model requests of about *line* bytes each, *total* bytes in all, in version 1."""
    messages = context(line)
    model = session.Execution("m", "model")
    with session.create(path, version=1) as s, s.begin_run() as run:
        while path.stat().st_size < total:
            request = session.ModelRequest(messages, [])
            run.record(session.Event("model_request", timestamp=T0, execution=model, request=request))


def strings_file(path: Path, line: int, total: int) -> None:
    """Tool results of one string of about *line* bytes each, *total* bytes in all."""
    tool = session.Execution("t", "tool")
    result = (TEXT * (line // len(TEXT) + 1))[:line]
    with session.create(path, version=1) as s, s.begin_run() as run:
        while path.stat().st_size < total:
            event = session.Event("tool_exec_end", timestamp=T0, execution=tool, tool="read", result=result)
            run.record(event)


def cpu(work: Callable[[], object]) -> Callable[[], float]:
    def measured() -> float:
        start = time.process_time()
        work()
        return time.process_time() - start

    return measured


def validate(path: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert session.main(["validate", str(path)]) == 0


def bare(path: Path) -> None:
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="interleaved pairs of each")
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}", flush=True)
    total = 24 << 20
    with tempfile.TemporaryDirectory() as scratch:
        files = {
            "requests of ~1.2 MB of small values": (requests_file, 1_200_000, 2.0),
            "requests of ~8 MB of small values": (requests_file, 8_000_000, None),
            "tool results of one ~8 MB string": (strings_file, 8_000_000, None),
        }
        for what, (make, line, bound) in files.items():
            path = Path(scratch) / "file.jsonl"
            make(path, line, total)
            size = path.stat().st_size
            ratio = median_ratio(
                args.runs, cpu(functools.partial(validate, path)), cpu(functools.partial(bare, path))
            )
            verdict = goal(ratio, bound) if bound else ""
            print(f"validate, {what} ({size / 2**20:.0f} MiB): {ratio:.2f}x the bare loop{verdict}")
            path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
