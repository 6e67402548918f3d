"""How long ``python -m session html`` takes on a large session, against ``validate``.

    python3 bench/html_page.py              # a ~230 MB session: every model request sends the whole context
    python3 bench/html_page.py 0.1          # a tenth of that: a smoke test
    python3 bench/html_page.py --version 1  # the same size in format version 1
    python3 bench/html_page.py --memory 1000 3000 10000 20000 40000  # peak memory at these turns

The session is made at run time, in format version 2 (each message written once: 230 MB is
some 30,000 turns) or 1 (each request writes every message again: 230 MB is some 400 turns),
under a temporary folder and removed afterwards.  Both
commands run as a user runs them (a new interpreter each time); the figure that counts is the
ratio of their median times (wall clock and CPU), measured in the same run, with the page's
size.  Unix only (CPU time of child processes).  With ``--memory``, the session is made with
each number of turns, and ``html`` runs alone on each in a new process and says its peak
resident memory (``ru_maxrss``, the interpreter included; the session is made in a process
of its own, since a process forked from a large one starts with its peak).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

assert sys.platform != "win32", "the CPU time of child processes is measured on Unix only"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import session  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "
TOOLS = [{"name": "read_file", "description": "Read a file", "parameters": {"path": "string"}}]


def build(path: Path, target: int, version: int, turns: int = 0) -> int:
    """Turns of question, tool call and result until the file holds *target* bytes (or,
    given *turns*, that many turns); each model request carries every message so far, as an
    agent without compaction sends it."""
    messages: List[session.Message] = []
    turn = 0
    with session.create(path, version=version) as s, s.begin_run() as run:
        run.record(session.Event("agent_start", timestamp=T0))
        while turn < turns if turns else path.stat().st_size < target:
            turn += 1
            moment = T0 + dt.timedelta(seconds=turn * 10)
            run.record(session.Event("turn_start", turn_index=turn, timestamp=moment))
            messages.append(
                session.Message("user", [session.text_block(f"{turn}: {TEXT * 4}")], timestamp=moment)
            )
            model = session.Execution(f"model-{turn}", "model", turn_index=turn)
            run.record(session.Event("model_exec_start", execution=model, timestamp=moment))
            request = session.ModelRequest(list(messages), TOOLS)
            run.record(session.Event("model_request", execution=model, request=request, timestamp=moment))
            call = session.tool_call_block(f"call-{turn}", "read_file", {"path": "a.py"})
            usage: session.Usage = {
                "input": 40 * len(messages),
                "output": 30,
                "total_tokens": 40 * len(messages) + 30,
            }
            reply = session.Message(
                "assistant", [session.text_block(TEXT), call], "toolUse", usage, timestamp=moment
            )
            end = moment + dt.timedelta(seconds=2)
            run.record(session.Event("model_exec_end", execution=model, message=reply, timestamp=end))
            run.record(session.Event("message_end", execution=model, message=reply, timestamp=end))
            tool = session.Execution(f"call-{turn}", "tool", parent_id=model.id, turn_index=turn)
            run.record(
                session.Event(
                    "tool_exec_start", execution=tool, tool="read_file", args={"path": "a.py"}, timestamp=end
                )
            )
            output = TEXT * 12
            done = end + dt.timedelta(seconds=1)
            run.record(
                session.Event(
                    "tool_exec_end", execution=tool, tool="read_file", result=output, timestamp=done
                )
            )
            result = session.tool_result(f"call-{turn}", output, timestamp=done)
            run.record(session.Event("message_end", execution=tool, message=result, timestamp=done))
            messages += [reply, result]
        run.record(session.Event("agent_end", summary=session.RunSummary(turn, turn, 0, "stop")))
    return turn


def seconds(*args: str) -> Tuple[float, float]:
    """Wall-clock and CPU seconds of one command (CPU time is steadier on a shared machine)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, "-m", "session", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def peak(*args: str) -> float:
    """The peak resident memory of one command, in MB, in a process of its own."""
    command = [sys.executable, "-m", "session", *args]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, command
    return usage.ru_maxrss / 1024  # KiB on Linux


def memory(counts: List[int]) -> None:
    print("turns | file | page | html peak | validate peak")
    for turns in counts:
        with tempfile.TemporaryDirectory() as folder:
            path, page = Path(folder) / "big.jsonl", Path(folder) / "big.html"
            # made in a process of its own: a child forked from this one would count its memory
            made = [sys.executable, __file__, "--build", str(path), str(turns)]
            subprocess.run(made, check=True)
            html = peak("html", str(path), "-o", str(page))
            validate = peak("validate", str(path))
            size, shown = path.stat().st_size / 1e6, page.stat().st_size / 1e6
            print(
                f"{turns:,} | {size:.0f} MB | {shown:.1f} MB | {html:.0f} MB | {validate:.0f} MB", flush=True
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory", type=int, nargs="+", help="peak memory of html at these turns")
    parser.add_argument("scale", nargs="?", type=float, default=1.0, help="of 230 MB (default: 1)")
    parser.add_argument("--version", type=int, choices=(1, 2), default=2, help="format version (default: 2)")
    parser.add_argument("--build", nargs=2, help=argparse.SUPPRESS)  # one session of --memory's
    args = parser.parse_args()
    if args.build:
        build(Path(args.build[0]), 0, 2, int(args.build[1]))
        return 0
    if args.memory:
        memory(args.memory)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        path, page = Path(folder) / "big.jsonl", Path(folder) / "big.html"
        turns = build(path, int(230e6 * args.scale), args.version)
        size = path.stat().st_size
        validate: List[Tuple[float, float]] = []
        html: List[Tuple[float, float]] = []
        for _ in range(3):  # interleaved: both see the same machine load
            validate.append(seconds("validate", str(path)))
            html.append(seconds("html", str(path), "-o", str(page)))
        print(
            f"session: {size / 1e6:.1f} MB in version {args.version}, {turns} turns,"
            f" full context in each of {turns} requests"
        )
        for n, what in enumerate(("wall clock", "CPU")):
            v = statistics.median(times[n] for times in validate)
            h = statistics.median(times[n] for times in html)
            print(f"{what:10}  validate: {v:.2f} s   html: {h:.2f} s   html/validate: {h / v:.2f}")
        shown = page.stat().st_size
        print(f"page: {shown / 1e6:.2f} MB ({shown / size * 100:.2f}% of the session)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
