"""What every benchmark here measures with: interleaved ratios, goals, wall time.

And the events the record benchmarks write, and the floor they are held to.  Standard library
only; the benchmarks here import it from beside them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Sequence

import session  # the benchmarks put the project's folder on sys.path first


def median_ratio(runs: int, subject: Callable[[], float], baseline: Callable[[], float]) -> float:
    """Median over *runs* interleaved pairs (subject first, then baseline first, ...) of
    subject time / baseline time: a noisy machine slows both of a pair alike."""
    ratios = []
    for i in range(runs):
        if i % 2:
            b, s = baseline(), subject()
        else:
            s, b = subject(), baseline()
        ratios.append(s / b)
    return statistics.median(ratios)


def goal(value: float, bound: float, unit: str = "x", at_least: bool = False) -> str:
    """The goal *value* is held to, and whether this run met it."""
    met = value >= bound if at_least else value <= bound
    return f" [goal {'>=' if at_least else '<='} {bound:g}{unit}: {'met' if met else 'NOT met'}]"


def timed(work: Callable[[], Any]) -> float:
    """Seconds *work* takes, by the wall clock."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


_PEAK = """
import resource, sys
sys.path.insert(0, sys.argv[1])
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak so far (start-up, the imports) set aside
    linux = True
except OSError:
    linux = False
%s
if linux:
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
else:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1 if sys.platform != "darwin" else 1024)
print(kb, file=sys.stderr)
"""


def peak_kb(work: str, *args: str) -> int:
    """The peak resident memory, in KiB, of a process of its own that runs the statements
    *work* (after its imports, with the project's folder on ``sys.path`` and *args* as
    ``sys.argv[2:]``). Linux: ``VmHWM`` after ``5`` is written to ``/proc/self/clear_refs``;
    elsewhere ``ru_maxrss``, which includes start-up."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", _PEAK % work, root, *args], capture_output=True, text=True, check=True
    )
    return int(done.stderr.split()[-1])


T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "


TOOL = session.Execution("call-7", "tool", parent_id="model-3", turn_index=3)


def small_event() -> session.Event:
    """A tool call's start (~200 B), built as a host builds it for each call."""
    return session.Event(
        "tool_exec_start", timestamp=T0, execution=TOOL, tool_id="call-7", tool="read_file",
        tool_label="Read file", args={"path": "src/app.py", "start": 1, "end": 400},
    )  # fmt: skip


def events() -> Dict[str, session.Event]:
    """A small (~200 B), medium (~2 KB) and large (~32 KB) event, as an agent records them."""
    tool = TOOL
    model = session.Execution("model-3", "model", turn_index=3)
    message = session.Message(
        "assistant",
        [
            session.text_block((TEXT * 22)[:1800]),
            session.tool_call_block("call-7", "read_file", {"path": "src/app.py"}),
        ],
        "toolUse",
        {"input": 1834, "output": 96, "total_tokens": 1930},
        timestamp=T0,
    )
    output = "".join(f"{n:5d}  {TEXT}\n" for n in range(370))[:32000]
    return {
        "small": small_event(),
        "medium": session.Event("message_end", timestamp=T0, execution=model, message=message),
        "large": session.Event(
            "tool_exec_end", timestamp=T0, execution=tool, tool_id="call-7", tool="read_file",
            tool_label="Read file", result={"content": [{"type": "text", "text": output}]},
            disposition="continue",
        ),
    }  # fmt: skip


def write_session(path: Path, target: int, checkpoint_every: int = 500, sizes: Sequence[str] = ()) -> int:
    """A session of about *target* bytes with the event *sizes* (all three by default) in
    turn; its record count."""
    sample = [event for size, event in events().items() if size in sizes or not sizes]
    with session.create(path) as s, s.begin_run() as run:
        count = 0
        while path.stat().st_size < target:
            for event in sample:
                run.record(event)
            count += 3
            if count % checkpoint_every < 3:
                turn = session.Message("user", [session.text_block(f"turn {count}")], timestamp=T0)
                run.save_checkpoint(session.AgentSnapshot(session.AgentState(messages=[turn])))
    return count


def bare_loop(path: Path) -> None:
    """The floor of every reader: ``for line in f: json.loads(line)`` over *path*."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            json.loads(line)


def tuned_encoder() -> Callable[[Any, int], Sequence[str]]:
    """The C encoder ``json.dumps`` builds on every call, built once: what ``record`` uses."""
    quote = json.encoder.encode_basestring
    return json.encoder.c_make_encoder(None, None, quote, None, ":", ",", False, False, False)  # type: ignore[attr-defined,no-any-return]
