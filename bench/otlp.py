"""What ``otlp`` costs against ``validate`` on the same file, and the size of a request per span.

    python3 bench/otlp.py              # a session of 600 model calls and 600 tool calls
    python3 bench/otlp.py --calls 2000
    python3 bench/otlp.py --memory 1000 10000 20000 40000   # peak memory at these turns (minutes)

The session is what an agent loop writes: each model call asks with the whole context so far
(version 2 writes each message once), answers 200 B to 2 KB, and is followed by a tool call.
The encoding is timed without the network (``otlp --output`` does the same work), each
figure the median of interleaved repetitions in this one process, as a ratio to ``validate``.
With ``--memory``, each export runs alone in a new process, its requests made and let go as
they come, and says its peak resident memory (Linux's ``VmHWM``: ``ru_maxrss`` would keep the
peak of this process, which forks it, and this one holds the whole session it wrote).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import session  # noqa: E402
import session_export  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "


def write_session(path: Path, calls: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    context = [session.Message("user", [session.text_block(TEXT * 4)], timestamp=T0)]
    tools = [{"name": "read", "description": "Read a file", "parameters": {"path": "string"}}]
    with session.create(path) as s, s.begin_run() as run:
        for n in range(calls):
            model = session.Execution(f"m{n}", "model", turn_index=n + 1)
            run.record(session.Event("model_exec_start", execution=model))
            request = session.ModelRequest(list(context), tools, session.CallConfig(max_tokens=4096))
            run.record(session.Event("model_request", execution=model, request=request))
            usage = session.Usage(input=rng.randrange(90000), output=rng.randrange(900), model="m-1")
            call = session.tool_call_block(f"c{n}", "read", {"path": f"file-{n}.txt"})
            blocks: List[session.ContentBlock] = [session.text_block(TEXT * rng.randrange(2, 25)), call]
            answer = session.Message("assistant", blocks, "toolUse", usage, timestamp=T0)
            run.record(session.Event("model_exec_end", execution=model, message=answer))
            tool = session.Execution(f"c{n}", "tool", parent_id=f"m{n}", turn_index=n + 1)
            run.record(session.Event("tool_exec_start", execution=tool, tool="read", tool_id=f"c{n}"))
            run.record(session.Event("tool_exec_end", execution=tool, tool="read", result=TEXT * 3))
            result = session.Message(
                "tool", [session.text_block(TEXT * 3)], metadata={"tool_call_id": f"c{n}"}
            )
            context += [answer, result]


def encoding(path: Path, options: Dict[str, Any]) -> Callable[[], object]:
    return lambda: list(session_export.otlp_requests([path], **options))


def median_seconds(runs: int, jobs: Dict[str, Callable[[], object]]) -> Dict[str, float]:
    """The median time of each job, the jobs interleaved *runs* times."""
    times: Dict[str, List[float]] = {name: [] for name in jobs}
    for _ in range(runs):
        for name, job in jobs.items():
            start = time.perf_counter()
            job()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(found) for name, found in times.items()}


def peak(path: str, content: bool) -> None:
    """Make the requests of *path*, letting each go, and print the peak resident MB."""
    for _ in session_export.otlp_requests([path], content=content):
        pass
    with open("/proc/self/status") as status:  # Linux only
        print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024)  # KiB


def memory(turns: List[int]) -> None:
    print("| turns | file | `otlp` peak | `otlp --content` peak |\n|---|---|---|---|")
    for count in turns:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "session.jsonl"
            write_session(path, count)
            peaks = [
                float(subprocess.check_output([sys.executable, __file__, "--peak", str(path), *flags]))
                for flags in ([], ["--content"])
            ]
            size = path.stat().st_size / 1e6
            print(f"| {count:,} | {size:.0f} MB | {peaks[0]:.0f} MB | {peaks[1]:.0f} MB |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--memory", type=int, nargs="+", help="peak memory at these turns")
    parser.add_argument("--peak", help=argparse.SUPPRESS)  # one export of --memory's
    parser.add_argument("--content", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak:
        return peak(args.peak, args.content)
    if args.memory:
        return memory(args.memory)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "session.jsonl"
        write_session(path, args.calls)
        size = path.stat().st_size
        variants: Dict[str, Dict[str, Any]] = {
            "otlp": {},
            "otlp --protocol http/json": {"protocol": "http/json"},
            "otlp --content": {"content": True},
        }
        bodies = {
            name: list(session_export.otlp_requests([path], **options)) for name, options in variants.items()
        }
        entries: List[Dict[str, Any]] = []
        bodies["otlp"] = list(session_export.otlp_requests([path], entries=entries))
        spans = entries[0]["spans"]
        jobs: Dict[str, Callable[[], object]] = {
            "validate": lambda: session.read(path, lambda record: None, resolve=False)
        }
        for name, options in variants.items():
            jobs[name] = encoding(path, options)
        medians = median_seconds(args.runs, jobs)
    print(f"{size / 1e6:.1f} MB session, {args.calls} model and tool calls: {spans} spans; {args.runs} runs")
    base = medians["validate"]
    print(f"{'validate':28} {size / base / 1e6:7.1f} MB/s  {spans / base:9.0f} spans/s")
    for name in variants:
        seconds = medians[name]
        raw = sum(len(body) for body in bodies[name])
        packed = sum(len(gzip.compress(body, 6)) for body in bodies[name])
        print(
            f"{name:28} {size / seconds / 1e6:7.1f} MB/s  {spans / seconds:9.0f} spans/s  "
            f"{seconds / base:4.1f}x validate  {raw / spans:6.0f} B/span ({packed / spans:4.0f} gzipped)"
        )


if __name__ == "__main__":
    main()
