"""The growth run: format version 1 against version 2 on a context that grows every turn.

    python3 bench/growth.py            # 10, 100 and 1,000 turns: about 10 minutes, a 1.2 GB file at its peak
    python3 bench/growth.py --quick    # 10 and 100 turns only: a smoke test of a few seconds
    python3 bench/growth.py --dir /big/disk  # where the files go (default: the system's temporary folder)

One model call per turn, as a host makes it: the host keeps its list of ``Message`` objects,
appends the reply (an assistant message, ~1 KB of text and a tool call) and the tool's result
(``tool_result``, ~1 KB), and passes ``ModelRequest(list(messages), TOOLS)`` with a fixed list
of tool declarations.  Each turn records ``turn_start``, ``model_exec_start``,
``model_request``, ``model_exec_end`` (the reply), ``message_end``, ``tool_exec_start``,
``tool_exec_end`` and ``turn_end``.  Version 1 writes every request with its whole context, so
its file grows with the square of the turns; version 2 writes each message once.

Every message is built before the clock starts, and each turn's events just before the
turn: "record" is the wall time of the ``Run.record`` calls alone, summed over the turns.
"validate" is ``session.main(["validate", FILE])`` (``python -m session validate``, in this
process, its output thrown away), per MB; "iter_records" is
``for r in session.iter_records(FILE): pass``, which gives each version-2 request back whole.
Every ratio is the median of interleaved pairs (v1 then v2, v2 then v1, ...), and every time
the median of its runs, because these machines are noisy.  Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure import goal, median_ratio, timed  # noqa: E402

import session  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "
TOOLS = [
    {"name": "read_file", "description": "Read a file of the project", "parameters": {"path": "string"}},
    {"name": "list_files", "description": "List a folder of the project", "parameters": {"folder": "string"}},
    {
        "name": "grep",
        "description": "Search the project",
        "parameters": {"pattern": "string", "in": "string"},
    },
    {"name": "run_tests", "description": "Run the test suite", "parameters": {"select": "string"}},
]
GOALS = {"size": 0.02, "speed-up": 20.0, "validate": 1.0}  # held at the largest number of turns


class Turn(NamedTuple):
    """What one turn adds to the context, built before any clock starts."""

    number: int
    reply: session.Message  # the assistant's: ~1 KB of text and a tool call
    result: session.Message  # the tool's: ~1 KB
    path: str
    output: str


HEAD = [
    session.Message("system", [session.text_block("You are a careful coding agent.")], timestamp=T0),
    session.Message("user", [session.text_block("Find what makes the tests slow.")], timestamp=T0),
]


def conversation(turns: int) -> List[Turn]:
    """The messages of *turns* turns: the context grows by ~2 KB a turn."""
    script = []
    for turn in range(1, turns + 1):
        call_id, path = f"call-{turn}", f"src/module_{turn}.py"
        reply = session.Message(
            "assistant",
            [
                session.text_block(f"Turn {turn}: {TEXT * 12}"[:1000]),
                session.tool_call_block(call_id, "read_file", {"path": path}),
            ],
            "toolUse",
            {"input": 500 * turn, "output": 260, "total_tokens": 500 * turn + 260},
            timestamp=T0,
        )
        output = "".join(f"{n:4d}  {TEXT}\n" for n in range(turn, turn + 12))[:1000]
        script.append(Turn(turn, reply, session.tool_result(call_id, output, timestamp=T0), path, output))
    return script


def turn_events(turn: Turn, context: List[session.Message]) -> List[session.Event]:
    """The events of one turn, as a host's kernel hands them over: the request a new list of
    the host's same ``Message`` objects, *context*."""
    model = session.Execution(f"model-{turn.number}", "model", turn_index=turn.number)
    call_id = f"call-{turn.number}"
    tool = session.Execution(call_id, "tool", parent_id=model.id, turn_index=turn.number)
    request = session.ModelRequest(list(context), TOOLS)
    return [
        session.Event("turn_start", timestamp=T0, turn_index=turn.number),
        session.Event("model_exec_start", timestamp=T0, execution=model),
        session.Event("model_request", timestamp=T0, execution=model, request=request),
        session.Event("model_exec_end", timestamp=T0, execution=model, message=turn.reply),
        session.Event("message_end", timestamp=T0, execution=model, message=turn.reply),
        session.Event(
            "tool_exec_start", timestamp=T0, execution=tool, tool_id=call_id, tool="read_file",
            tool_label="Read file", args={"path": turn.path},
        ),
        session.Event(
            "tool_exec_end", timestamp=T0, execution=tool, tool_id=call_id, tool="read_file",
            tool_label="Read file", result={"content": [{"type": "text", "text": turn.output}]},
        ),
        session.Event("turn_end", timestamp=T0, turn_index=turn.number),
    ]  # fmt: skip


def record(path: Path, version: int, script: Sequence[Turn]) -> float:
    """Seconds to record *script* into a new session at *path* (replaced), version *version*:
    the ``record`` calls only, summed turn by turn; not building each turn's events (done
    just before it, so that the process holds what a host holds: its messages and the
    latest request), nor ``create`` (which syncs its first line) nor ``close``."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    context = list(HEAD)
    elapsed = 0.0
    with session.create(path, version=version) as s, s.begin_run() as run:
        for turn in script:
            events = turn_events(turn, context)
            start = time.perf_counter()
            for event in events:
                run.record(event)
            elapsed += time.perf_counter() - start
            context += [turn.reply, turn.result]
    return elapsed


def validate(path: Path) -> float:
    """Seconds per MB (2**20 bytes) for ``python -m session validate`` of *path*, in process."""
    with open(os.devnull, "w", encoding="utf-8") as devnull, contextlib.redirect_stdout(devnull):
        start = time.perf_counter()
        status = session.main(["validate", str(path)])
        elapsed = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"validate {path}: exit status {status}")
    return elapsed / (path.stat().st_size / (1 << 20))


def iterate(path: Path) -> float:
    def loop() -> None:
        for _ in session.iter_records(path):
            pass

    return timed(loop)


def same_content(v1: Path, v2: Path) -> None:
    """The two files hold the same events: version 2 read back with its references resolved is
    version 1, but for the ids, the header, the run's bounds and the ``message`` and ``tools``
    records."""
    skip = {"session_start", "run_start", "run_close", "message", "tools"}

    def events(path: Path) -> List[Tuple[str, str, Any]]:
        return [(r.type, r.time, r.data) for r in session.iter_records(path) if r.type not in skip]

    if events(v1) != events(v2):
        raise RuntimeError(f"{v1} and {v2} do not hold the same events")


Times = Dict[str, List[float]]  # every run's seconds (validate: per MB) by what and version


def measured(
    times: Times, key: str, version: int, path: Path, work: Callable[[Path], float]
) -> Callable[[], float]:
    """*work* on *path*, its time kept in *times* as ``key + version``."""

    def run() -> float:
        elapsed = work(path)
        times.setdefault(f"{key}{version}", []).append(elapsed)
        return elapsed

    return run


def bench_record(paths: Dict[int, Path], turns: int, runs: int, times: Times) -> float:
    """The speed-up of recording, v1 time over v2 time; leaves the last files at *paths*."""
    script = conversation(turns)  # let go on return: the readers run without it

    def recorder(version: int) -> Callable[[], float]:
        return measured(times, "record", version, paths[version], lambda path: record(path, version, script))

    return median_ratio(runs, recorder(1), recorder(2))


def bench_turns(folder: Path, turns: int, runs: int) -> Dict[str, float]:
    paths = {version: folder / f"v{version}-{turns}.jsonl" for version in (1, 2)}
    times: Times = {}
    figures = {"speed-up": bench_record(paths, turns, runs, times)}
    if turns <= 100:  # reading the 1,000-turn version 1 into a list would take gigabytes
        same_content(paths[1], paths[2])
    for key, work in (("validate", validate), ("iterate", iterate)):
        v2, v1 = (measured(times, key, version, paths[version], work) for version in (2, 1))
        figures[key] = median_ratio(runs, v2, v1)
    figures.update({key: statistics.median(values) for key, values in times.items()})
    figures["bytes1"], figures["bytes2"] = (paths[v].stat().st_size for v in (1, 2))
    figures["size"] = figures["bytes2"] / figures["bytes1"]
    for path in paths.values():
        path.unlink()
    return figures


def size_text(n: float) -> str:
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n:.0f} B"


def seconds_text(t: float) -> str:
    return f"{t:.2f} s" if t >= 1 else f"{t * 1000:.1f} ms" if t >= 1e-3 else f"{t * 1e6:.0f} µs"


HEADER = (
    "| turns | v1 size | v2 size | v2/v1 size | record v1 | record v2 | speed-up v1/v2 "
    "| validate v1 per MB | validate v2 per MB | validate per byte v2/v1 "
    "| iter_records v1 | iter_records v2 | iter_records v2/v1 |\n" + "|---" * 13 + "|"
)


def row(turns: int, f: Dict[str, float]) -> str:
    cells = [
        f"{turns:,}",
        size_text(f["bytes1"]),
        size_text(f["bytes2"]),
        f"{f['size']:.2%}",
        seconds_text(f["record1"]),
        seconds_text(f["record2"]),
        f"{f['speed-up']:.1f}x",
        seconds_text(f["validate1"]),
        seconds_text(f["validate2"]),
        f"{f['validate']:.2f}x",
        seconds_text(f["iterate1"]),
        seconds_text(f["iterate2"]),
        f"{f['iterate']:.2f}x",
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10 and 100 turns only: a smoke test")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: the system's)")
    args = parser.parse_args(argv)
    plan = [(10, 5), (100, 5)] if args.quick else [(10, 15), (100, 9), (1000, 3)]
    need = 50 << 20 if args.quick else 2 << 30  # the 1,000-turn version-1 file is ~1.3 GB
    where = args.dir if args.dir is not None else Path(tempfile.gettempdir())
    free = shutil.disk_usage(where).free
    if free < need:
        print(f"{where}: {size_text(free)} free, the run needs {size_text(need)}; try --dir", file=sys.stderr)
        return 1
    print(
        f"Python {sys.version.split()[0]} on {os.cpu_count()} cores; times are medians, ratios medians of "
        "interleaved pairs; [goal] as the project holds it at 1,000 turns",
        flush=True,
    )
    print(HEADER, flush=True)
    largest: Dict[str, float] = {}
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # remove the files
    with tempfile.TemporaryDirectory(prefix="growth-", dir=where) as scratch:
        for turns, runs in plan:
            largest = bench_turns(Path(scratch), turns, runs)
            print(row(turns, largest), flush=True)
    turns = plan[-1][0]
    if turns < 1000:
        print("\n(the goals are held at 1,000 turns: run without --quick)")
        return 0
    print(
        f"\nat {turns:,} turns: version 2 is {largest['size']:.2%} of version 1's size"
        f"{goal(largest['size'] * 100, GOALS['size'] * 100, '%')}; records {largest['speed-up']:.1f}x as fast"
        f"{goal(largest['speed-up'], GOALS['speed-up'], at_least=True)}; validates at "
        f"{largest['validate']:.2f}x version 1's time per byte{goal(largest['validate'], GOALS['validate'])}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
