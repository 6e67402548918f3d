"""Benchmarks of session.py against the bare stdlib loops and the jsonlines package.

    python3 bench/run.py            # about 5 minutes; writes ~1.3 GB under a temporary folder
    python3 bench/run.py --quick    # smaller files, fewer repetitions: a smoke test
    python3 bench/run.py --import-only  # only the start-up times, a minute

Every figure is a ratio against a baseline measured in the same run: the median of
interleaved repetitions, because these machines are noisy.  Needs `pip install jsonlines`.
"""

from __future__ import annotations

import argparse
import importlib
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
from measure import bare_loop, events, goal, median_ratio, timed, tuned_encoder, write_session  # noqa: E402

import session  # noqa: E402

RECORD_GOALS = {"small": 1.25, "medium": 1.4, "large": 1.0}  # against the tuned floor


def bench_record(folder: Path, n: int, runs: int) -> List[str]:
    rows = []
    encoder = tuned_encoder()
    for size, event in events().items():
        path = folder / f"record-{size}.jsonl"
        s = session.create(path)
        run = s.begin_run()
        run.record(event)
        line = json.loads(path.read_bytes().splitlines()[-1])
        fd = os.open(folder / f"bare-{size}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        peer_file = open(folder / f"jsonlines-{size}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        peer = jsonlines.Writer(peer_file, flush=True, dumps=json.dumps)  # as installed without orjson

        def ours(event: session.Event = event, run: session.Run = run) -> float:
            return timed(lambda: [run.record(event) for _ in range(n)])

        def bare(line: Dict[str, Any] = line, fd: int = fd) -> float:
            def loop() -> None:
                for _ in range(n):
                    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
                    os.write(fd, (text + "\n").encode())

            return timed(loop)

        def tuned(line: Dict[str, Any] = line, fd: int = fd) -> float:
            def loop() -> None:
                for _ in range(n):
                    os.write(fd, ("".join(encoder(line, 0)) + "\n").encode())

            return timed(loop)

        def theirs(line: Dict[str, Any] = line, peer: Any = peer) -> float:
            return timed(lambda: [peer.write(line) for _ in range(n)])

        to_tuned = median_ratio(runs, ours, tuned)
        rows.append(
            f"record {size:6} ({len(json.dumps(line, separators=(',', ':')).encode()):5} B): "
            f"{to_tuned:.2f}x the tuned floor (encoder built once + os.write)"
            f"{goal(to_tuned, RECORD_GOALS[size])}, "
            f"{median_ratio(runs, ours, bare):.2f}x the json.dumps + os.write loop, "
            f"{median_ratio(runs, ours, theirs):.2f}x jsonlines (flush per line)"
        )
        s.close()
        os.close(fd)
        peer.close()
        peer_file.close()
    return rows


def bench_read(path: Path, runs: int, summarize_goal: float) -> List[str]:
    def ours() -> float:
        return timed(lambda: session.read(path, lambda record: None))

    def iterate() -> float:
        return timed(lambda: [None for _ in session.iter_records(path)])

    def summarized() -> float:
        return timed(lambda: session.summarize(path))

    def bare() -> float:
        return timed(lambda: bare_loop(path))

    def tuned() -> float:  # the floor: what session.read does, less the checks
        def loop() -> None:
            with open(path, "rb", buffering=1 << 20) as f:
                for line in f:
                    json.loads(line)

        return timed(loop)

    def theirs(loads: Callable[[Any], Any]) -> Callable[[], float]:
        def loop() -> None:
            with jsonlines.open(path, loads=loads) as reader:
                for _ in reader:
                    pass

        return lambda: timed(loop)

    def opened() -> float:
        return timed(lambda: session.open(path).close())

    size = path.stat().st_size >> 20
    to_bare = median_ratio(runs, ours, bare)
    to_summary = median_ratio(runs, summarized, bare)
    opened_to_bare = median_ratio(runs, opened, bare)
    rows = [
        f"read         ({size} MB): {to_bare:.3f}x the bare "
        f"`for line in f: json.loads(line)` loop{goal(to_bare, 1.05)}, "
        f"{median_ratio(runs, ours, tuned):.3f}x that loop on a binary file with a 1 MB buffer, "
        f"{median_ratio(runs, ours, theirs(json.loads)):.2f}x jsonlines' reader",
        f"iter_records ({size} MB): {median_ratio(runs, iterate, bare):.3f}x the bare loop",
        f"summarize    ({size} MB): {to_summary:.3f}x the bare loop{goal(to_summary, summarize_goal)}",
        f"open         ({size} MB): {opened_to_bare:.3f}x the bare loop{goal(opened_to_bare, 1.05)}, "
        f"{median_ratio(runs, opened, ours):.3f}x read",
    ]
    try:
        orjson = importlib.import_module("orjson")  # what jsonlines takes when it is installed
    except ImportError:
        return rows
    with_orjson = median_ratio(runs, ours, theirs(orjson.loads))
    rows.append(f"read         ({size} MB): {with_orjson:.2f}x jsonlines' reader with orjson installed")
    return rows


def bench_checkpoint(big: Path, small: Path, runs: int) -> str:
    def load(path: Path) -> Callable[[], float]:
        def work() -> float:
            with session.open(path) as s:  # opening is not what is timed
                return statistics.median(timed(s.load_checkpoint) for _ in range(25))

        return work

    big_size, small_size = big.stat().st_size >> 20, small.stat().st_size >> 20
    ratio = median_ratio(runs, load(big), load(small))
    return (
        f"load_checkpoint after open: {ratio:.2f}x on a {big_size} MB file against a {small_size} MB one"
        " [goal: independent of the file's size]"
    )


PEAK = """
import sys
sys.path.insert(0, {root!r})
import session

def kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
before = kib("VmRSS")
{work}
print(before, kib("VmHWM"))
"""


def bench_memory(path: Path) -> List[str]:
    """The peak each reader adds to a process that imported session, one process per
    measurement: its peak reset (Linux) after the import, so that start-up does not hide it."""
    if not os.path.exists("/proc/self/clear_refs"):
        return ["peak memory: not measured (needs Linux's /proc/self/clear_refs)"]
    with path.open("rb") as f:
        longest = max(len(line) for line in f)
    rows = []
    for name, work in (
        ("read", "session.read({p!r}, lambda r: None)"),
        ("open", "session.open({p!r}).close()"),
        ("summarize", "session.summarize({p!r})"),
        ("validate", "session.main(['validate', {p!r}])"),
        ("(for contrast) list(iter_records)", "records = list(session.iter_records({p!r}))"),
    ):
        code = PEAK.format(root=str(ROOT), work=work.format(p=str(path)))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        before, after = (int(kib) / 1024 for kib in done.stdout.split()[-2:])
        size = path.stat().st_size >> 20
        rows.append(
            f"peak memory of {name} on {size} MB: {after - before:.1f} MB over the process after "
            f"`import session` (VmHWM after a reset; longest line {longest >> 10} KB)"
            + (" [goal: bounded by the longest line, not the file]" if name[0] != "(" else "")
        )
    return rows


def in_threads(threads: int, work: Callable[[], object]) -> float:
    """Seconds for *threads* threads to run *work* each, from the first start to the last end."""
    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def bench_threads(folder: Path, n: int, runs: int) -> List[str]:
    event = events()["small"]

    def throughput(threads: int) -> Callable[[], float]:  # the same number of records either way
        def work() -> float:
            path = folder / f"threads-{threads}-{time.perf_counter_ns()}.jsonl"
            with session.create(path) as s, s.begin_run() as run:
                elapsed = in_threads(threads, lambda: [run.record(event) for _ in range(n // threads)])
            path.unlink()
            return elapsed

        return work

    def floor(threads: int) -> Callable[[], float]:  # a line written under one lock: the least a writer does
        def work() -> float:
            path = folder / f"floor-{threads}-{time.perf_counter_ns()}.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            lock = threading.Lock()

            def write() -> None:
                for _ in range(n // threads):
                    with lock:
                        os.write(fd, (json.dumps({"x": "y" * 300}, separators=(",", ":")) + "\n").encode())

            elapsed = in_threads(threads, write)
            os.close(fd)
            path.unlink()
            return elapsed

        return work

    # Pinned to one core: on two cores, eight threads mostly measure the wake-ups of a thread
    # on the other core, which the bare loop pays as much; on one, what the writer's lock costs.
    # (Linux only: elsewhere they run unpinned, and the line says so.)
    where = "unpinned"
    if sys.platform == "linux":
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cores)})
        where = "pinned to one core"
    try:
        ours = 1 / median_ratio(runs, throughput(8), throughput(1))
        bare = 1 / median_ratio(runs, floor(8), floor(1))
    finally:
        if sys.platform == "linux":
            os.sched_setaffinity(0, cores)
    return [
        f"record from 8 threads, {where}: {ours:.2f}x the throughput of 1 thread"
        f"{goal(ours, 0.8, at_least=True)} (json.dumps + os.write under one lock: {bare:.2f}x)"
    ]


def bench_import(runs: int) -> List[str]:
    """Whole processes, bytecode cached as users run them: ``import session`` against
    ``import json``, and ``validate`` of a small file against ``python -c pass``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as users run it: compiled once, then cached
    with tempfile.TemporaryDirectory() as scratch:
        small = Path(scratch) / "small.jsonl"
        write_session(small, 4096)
        commands = {
            "pass": ["-c", "pass"],
            "json": ["-c", "import json"],
            "session": ["-c", "import session"],
            "validate": ["-m", "session", "validate", str(small)],
        }

        def whole(args: List[str]) -> float:
            return timed(
                lambda: subprocess.run(
                    [sys.executable, *args], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL
                )
            )

        for args in commands.values():
            whole(args)  # compiles and caches the bytecode
        times: Dict[str, List[float]] = {name: [] for name in commands}
        for i in range(runs):  # interleaved, in a turning order
            names = list(commands)
            for name in names[i % 4 :] + names[: i % 4]:
                times[name].append(whole(commands[name]))
    over_json = statistics.median(a - b for a, b in zip(times["session"], times["json"])) * 1000
    validate = statistics.median(a - b for a, b in zip(times["validate"], times["pass"])) * 1000
    return [
        f"import session: {over_json:.1f} ms more than import json (no goal) "
        f"(whole process, bytecode cached, median of {runs})",
        f"python -m session validate (small file): {validate:.1f} ms more than python -c pass"
        f"{goal(validate, 20, ' ms')}",
    ]


def bench_files(quick: bool) -> None:
    runs = 5 if quick else 15
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as scratch:
        folder = Path(scratch)
        for row in bench_record(folder, 200 if quick else 2000, runs):
            print(row, flush=True)
        for row in bench_threads(folder, 2000 if quick else 16000, runs):
            print(row, flush=True)
        mixed = folder / "mixed.jsonl"
        write_session(mixed, (10 if quick else 100) << 20)
        print("-- a file of small, medium and large records in turn", flush=True)
        for row in bench_read(mixed, 3 if quick else 7, summarize_goal=1.0):
            print(row, flush=True)
        small_only = folder / "small-records.jsonl"
        write_session(small_only, (10 if quick else 100) << 20, sizes=("small",))
        print("-- a file of small records only: the most lines for its size", flush=True)
        for row in bench_read(small_only, 3 if quick else 7, summarize_goal=1.3):
            print(row, flush=True)
        big = folder / "big.jsonl"
        write_session(big, (100 if quick else 1024) << 20)
        small = folder / "small.jsonl"
        write_session(small, 1 << 20, checkpoint_every=30)
        print(bench_checkpoint(big, small, runs), flush=True)
        for row in bench_memory(big):
            print(row, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small files, few repetitions")
    parser.add_argument("--import-only", action="store_true", help="only the start-up times")
    args = parser.parse_args(argv)
    print(
        f"Python {sys.version.split()[0]} on {os.cpu_count()} cores; every figure is a median "
        "of interleaved runs, [goal] as the project holds it"
    )
    if not args.import_only:
        bench_files(args.quick)
    for row in bench_import(10 if args.quick else 40):
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
