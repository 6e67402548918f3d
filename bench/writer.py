"""The writer's own costs: building an ``Event``, a version-2 request, a long conversation.

    python3 bench/writer.py            # about 3 minutes; writes ~300 MB under a temporary folder
    python3 bench/writer.py --quick    # fewer records and turns: a smoke test

- "record small, Event built each time": ``run.record(Event(...))`` of a tool call's start,
  the Event made in the loop as a host makes it, against the tuned floor of ``bench/run.py``
  (the line ``record`` writes, encoded by the C encoder ``json.dumps`` uses inside, built
  once, and ``os.write``); beside it the same with the Event built once, and a message's.
- "request": a version-2 ``model_request`` whose context is the previous request's and one
  new message, against the floor of its two lines (the message record and the request).
- "per turn": the CPU time (``time.process_time``) of one turn's ``record`` calls, as
  ``bench/growth.py`` records a turn, averaged over a whole conversation of 1,500 and of
  12,000 turns: the ratio says whether recording stays linear as the context grows.

Every ratio is the median of interleaved pairs.  Standard library only.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import growth  # noqa: E402 - the conversation and the turn it records
from measure import T0, TEXT, events, goal, median_ratio, small_event, timed, tuned_encoder  # noqa: E402

import session  # noqa: E402

GOALS = {"built": 2.1, "small": 2.1, "medium": 1.6, "turns": 1.2}


def floor(path: Path, n: int, lines: int = 1) -> Callable[[], float]:
    """The tuned floor: the last *lines* lines of *path* written *n* times each, each one
    encoded from its value by the C encoder and written with one ``os.write``."""
    encoder = tuned_encoder()
    values = [json.loads(line) for line in path.read_bytes().splitlines()[-lines:]]
    fd = os.open(path.with_suffix(".floor"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def loop() -> None:
        for _ in range(n):
            for value in values:
                os.write(fd, ("".join(encoder(value, 0)) + "\n").encode())

    return lambda: timed(loop)


def bench_records(folder: Path, n: int, runs: int) -> List[str]:
    path = folder / "records.jsonl"
    rows = []
    with session.create(path) as s, s.begin_run() as run:
        built = events()
        cases: Dict[str, Callable[[], Any]] = {
            "built": lambda: [run.record(small_event()) for _ in range(n)],
            "small": lambda: [run.record(built["small"]) for _ in range(n)],
            "medium": lambda: [run.record(built["medium"]) for _ in range(n)],
        }
        for name, work in cases.items():
            work()  # the line to hold it to
            ratio = median_ratio(runs, functools.partial(timed, work), floor(path, n))
            what = {"built": "small, Event built each time", "small": "small", "medium": "medium"}[name]
            rows.append(f"record {what}: {ratio:.2f}x the tuned floor{goal(ratio, GOALS[name])}")
    return rows


def requests(context: int, count: int) -> List[session.Event]:
    """*count* model requests, each with the context of the one before and one new message."""
    messages = [
        session.Message(
            "user" if i % 2 else "assistant", [session.text_block(f"{i} {TEXT * 12}"[:1000])], timestamp=T0
        )
        for i in range(context + count)
    ]
    model = session.Execution("model-1", "model")
    return [
        session.Event(
            "model_request", timestamp=T0, execution=model,
            request=session.ModelRequest(messages[: context + i + 1], growth.TOOLS),
        )
        for i in range(count)
    ]  # fmt: skip


def encodings_per_request(folder: Path, first: session.Event, rest: List[session.Event]) -> float:
    """How many times a request's recording calls ``session._dumps``, the module's encoder."""
    calls = [0]
    encode = session._dumps

    def counted(value: Any) -> str:
        calls[0] += 1
        return encode(value)

    session._dumps = counted
    try:
        with session.create(folder / "counted.jsonl") as s, s.begin_run() as run:
            run.record(first)
            calls[0] = 0
            for event in rest:
                run.record(event)
    finally:
        session._dumps = encode
    return calls[0] / len(rest)


def bench_request(folder: Path, n: int, runs: int) -> str:
    first, *rest = requests(100, n + 1)
    paths = iter(folder / f"request-{i}.jsonl" for i in range(2 * runs + 1))

    def ours() -> float:
        with session.create(next(paths)) as s, s.begin_run() as run:
            run.record(first)  # the context before: written once
            return timed(lambda: [run.record(event) for event in rest])

    ours()
    last = max(folder.glob("request-*.jsonl"))
    with last.open("ab") as f:  # the floor's lines: the last request's message and itself
        f.truncate(f.tell() - len(last.read_bytes().splitlines(keepends=True)[-1]))  # run_close
    ratio = median_ratio(runs, ours, floor(last, n, lines=2))
    return (
        f"record a version-2 request of one new message: {ratio:.2f}x the tuned floor of its two lines "
        f"(no goal), {encodings_per_request(folder, first, rest):.1f} encodings per request"
    )


def cpu_per_turn(path: Path, turns: int) -> float:
    """CPU seconds per turn of recording *turns* turns, as growth.py records them."""
    script = growth.conversation(turns)
    context = list(growth.HEAD)
    cpu = 0.0
    with session.create(path) as s, s.begin_run() as run:
        for turn in script:
            events = growth.turn_events(turn, context)
            start = time.process_time()
            for event in events:
                run.record(event)
            cpu += time.process_time() - start
            context += [turn.reply, turn.result]
    path.unlink()
    return cpu / turns


def bench_turns(folder: Path, few: int, many: int, runs: int) -> str:
    times: Dict[int, List[float]] = {few: [], many: []}

    def measure(turns: int) -> Callable[[], float]:
        def run() -> float:
            times[turns].append(cpu_per_turn(folder / "turns.jsonl", turns))
            return times[turns][-1]

        return run

    ratio = median_ratio(runs, measure(many), measure(few))
    return (
        f"CPU per turn at {many:,} turns: {statistics.median(times[many]) * 1e6:.0f} µs, "
        f"{ratio:.2f}x that at {few:,} ({statistics.median(times[few]) * 1e6:.0f} µs)"
        + goal(ratio, GOALS["turns"])
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer records and turns: a smoke test")
    args = parser.parse_args(argv)
    runs = 5 if args.quick else 15
    print(
        f"Python {sys.version.split()[0]} on {os.cpu_count()} cores; ratios are medians of interleaved pairs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="writer-") as scratch:
        folder = Path(scratch)
        for row in bench_records(folder, 500 if args.quick else 4000, runs):
            print(row, flush=True)
        print(bench_request(folder, 200 if args.quick else 1000, runs), flush=True)
        few, many = (150, 1200) if args.quick else (1500, 12000)
        print(bench_turns(folder, few, many, 3), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
