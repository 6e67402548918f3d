"""Benchmarks of session.py against the bare stdlib loops and the jsonlines package.

    python3 bench/run.py            # about 5 minutes; writes ~1.3 GB under a temporary folder
    python3 bench/run.py --quick    # smaller files, fewer repetitions: a smoke test

Every figure is a ratio against a baseline measured in the same run: the median of
interleaved repetitions, because these machines are noisy.  Needs `pip install jsonlines`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jsonlines  # noqa: E402 - the peer to compare with

import session  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "


def events() -> Dict[str, session.Event]:
    """A small (~200 B), medium (~2 KB) and large (~32 KB) event, as an agent records them."""
    tool = session.Execution("call-7", "tool", parent_id="model-3", turn_index=3)
    model = session.Execution("model-3", "model", turn_index=3)
    message = session.Message(
        "assistant",
        [
            {"type": "text", "text": (TEXT * 22)[:1800]},
            {"type": "tool_call", "id": "call-7", "name": "read_file", "arguments": {"path": "src/app.py"}},
        ],
        "tool_use",
        {"input": 1834, "output": 96, "total_tokens": 1930},
        timestamp=T0,
    )
    output = "".join(f"{n:5d}  {TEXT}\n" for n in range(370))[:32000]
    return {
        "small": session.Event(
            "tool_exec_start", timestamp=T0, execution=tool, tool_id="call-7", tool="read_file",
            tool_label="Read file", args={"path": "src/app.py", "start": 1, "end": 400},
        ),
        "medium": session.Event("message_end", timestamp=T0, execution=model, message=message),
        "large": session.Event(
            "tool_exec_end", timestamp=T0, execution=tool, tool_id="call-7", tool="read_file",
            tool_label="Read file", result={"content": [{"type": "text", "text": output}]}, disposition="continue",
        ),
    }  # fmt: skip


def median_ratio(runs: int, subject: Callable[[], float], baseline: Callable[[], float]) -> float:
    """Median over *runs* interleaved pairs of subject time / baseline time."""
    ratios = []
    for i in range(runs):
        if i % 2:
            b, s = baseline(), subject()
        else:
            s, b = subject(), baseline()
        ratios.append(s / b)
    return statistics.median(ratios)


def timed(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def bench_record(folder: Path, n: int, runs: int) -> List[str]:
    rows = []
    for size, event in events().items():
        path = folder / f"record-{size}.jsonl"
        s = session.create(path)
        run = s.begin_run()
        run.record(event)
        line = json.loads(path.read_bytes().splitlines()[-1])
        fd = os.open(folder / f"bare-{size}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        peer_file = open(folder / f"jsonlines-{size}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        peer = jsonlines.Writer(peer_file, flush=True)

        def ours(event: session.Event = event, run: session.Run = run) -> float:
            return timed(lambda: [run.record(event) for _ in range(n)])

        def bare(line: Dict[str, Any] = line, fd: int = fd) -> float:
            def loop() -> None:
                for _ in range(n):
                    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
                    os.write(fd, (text + "\n").encode())

            return timed(loop)

        def theirs(line: Dict[str, Any] = line, peer: Any = peer) -> float:
            return timed(lambda: [peer.write(line) for _ in range(n)])

        rows.append(
            f"record {size:6} ({len(json.dumps(line, separators=(',', ':')).encode()):5} B): "
            f"{median_ratio(runs, ours, bare):.2f}x the bare json.dumps + os.write loop, "
            f"{median_ratio(runs, ours, theirs):.2f}x jsonlines (flush per line)"
        )
        s.close()
        os.close(fd)
        peer.close()
        peer_file.close()
    return rows


def write_session(path: Path, target: int, checkpoint_every: int = 500) -> int:
    """A session of about *target* bytes with the three event sizes mixed; its record count."""
    sample = list(events().values())
    with session.create(path) as s, s.begin_run() as run:
        count = 0
        while path.stat().st_size < target:
            for event in sample:
                run.record(event)
            count += 3
            if count % checkpoint_every < 3:
                run.save_checkpoint(session.AgentSnapshot(session.AgentState(messages=[{"n": count}])))
    return count


def bench_read(path: Path, runs: int) -> List[str]:
    def ours() -> float:
        return timed(lambda: session.read(path, lambda record: None))

    def iterate() -> float:
        return timed(lambda: [None for _ in session.iter_records(path)])

    def bare() -> float:
        def loop() -> None:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    json.loads(line)

        return timed(loop)

    def theirs() -> float:
        def loop() -> None:
            with jsonlines.open(path) as reader:
                for _ in reader:
                    pass

        return timed(loop)

    def opened() -> float:
        return timed(lambda: session.open(path).close())

    size = path.stat().st_size >> 20
    return [
        f"read       ({size} MB): {median_ratio(runs, ours, bare):.3f}x the bare `for line in f: json.loads(line)` loop, "
        f"{median_ratio(runs, ours, theirs):.2f}x jsonlines' reader",
        f"iter_records ({size} MB): {median_ratio(runs, iterate, bare):.3f}x the bare loop",
        f"open       ({size} MB): {median_ratio(runs, opened, ours):.3f}x read, {median_ratio(runs, opened, bare):.3f}x the bare loop",
    ]  # fmt: skip


def bench_checkpoint(big: Path, small: Path, runs: int) -> str:
    def load(path: Path) -> Callable[[], float]:
        def work() -> float:
            with session.open(path) as s:  # opening is not what is timed
                return timed(s.load_checkpoint)

        return work

    big_size, small_size = big.stat().st_size >> 20, small.stat().st_size >> 20
    ratio = median_ratio(runs, load(big), load(small))
    return f"load_checkpoint after open: {ratio:.2f}x on a {big_size} MB file against a {small_size} MB one"


PEAK = """
import resource, sys
sys.path.insert(0, {root!r})
import session
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
{work}
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def bench_memory(path: Path) -> List[str]:
    longest = max(len(line) for line in path.open("rb"))
    rows = []
    for name, work in (
        ("read", "session.read({p!r}, lambda r: None)"),
        ("open", "session.open({p!r}).close()"),
        ("validate", "session.main(['validate', {p!r}])"),
    ):
        code = PEAK.format(root=str(ROOT), work=work.format(p=str(path)))
        growth = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()[-1])
        rows.append(f"peak RSS growth of {name:8} on {path.stat().st_size >> 20} MB: {growth / 1024:.1f} MB "
                    f"(longest line {longest / 1024:.0f} KB)")  # fmt: skip
    return rows


def bench_threads(folder: Path, n: int, runs: int) -> str:
    event = events()["small"]

    def throughput(threads: int) -> Callable[[], float]:
        def work() -> float:
            path = folder / f"threads-{threads}-{time.perf_counter_ns()}.jsonl"
            with session.create(path) as s, s.begin_run() as run:
                per = n // threads
                workers = [threading.Thread(target=lambda: [run.record(event) for _ in range(per)]) for _ in range(threads)]
                start = time.perf_counter()
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()
                elapsed = time.perf_counter() - start
            path.unlink()
            return elapsed  # the same number of records either way

        return work

    ratio = 1 / median_ratio(runs, throughput(8), throughput(1))
    return f"record from 8 threads: {ratio:.2f}x the throughput of 1 thread"


def bench_import(runs: int) -> str:
    def whole(module: str) -> Callable[[], float]:
        command = [sys.executable, "-c", f"import {module}"]
        return lambda: timed(lambda: subprocess.run(command, check=True, cwd=ROOT))

    ours, theirs = whole("session"), whole("json")
    pairs = [(ours(), theirs()) for _ in range(runs)]
    extra = statistics.median(a - b for a, b in pairs) * 1000
    return f"import session: {extra:.1f} ms more than import json (whole process, median of {runs})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small files, few repetitions")
    args = parser.parse_args(argv)
    quick = args.quick
    runs = 5 if quick else 15
    print(f"Python {sys.version.split()[0]} on {os.cpu_count()} cores; every figure is a median of interleaved runs")
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as scratch:
        folder = Path(scratch)
        for row in bench_record(folder, 200 if quick else 2000, runs):
            print(row, flush=True)
        print(bench_threads(folder, 2000 if quick else 16000, runs), flush=True)
        medium = folder / "medium.jsonl"
        write_session(medium, (10 if quick else 100) << 20)
        for row in bench_read(medium, 3 if quick else 7):
            print(row, flush=True)
        big = folder / "big.jsonl"
        write_session(big, (100 if quick else 1024) << 20)
        small = folder / "small.jsonl"
        write_session(small, 1 << 20)
        print(bench_checkpoint(big, small, runs), flush=True)
        for row in bench_memory(big):
            print(row, flush=True)
    print(bench_import(10 if quick else 40), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
