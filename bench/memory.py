"""Peak memory of the readers on a file whose one long line is hostile, and on a long
version-2 session.

    python3 bench/memory.py               # 64 MB lines; about 10 minutes
    python3 bench/memory.py --mb 250      # the size of the review's report (needs ~8 GB free)
    python3 bench/memory.py --place messages --shape ranges --shape {},  # a request's references
    python3 bench/memory.py --version-2 200000  # a session of 200,000 messages (~250 MB)

Each shape fills the data of one record of a valid session with a long array: ``{},`` (a
dict per 3 bytes), ``1.5,`` (a float per 4), ``0,`` (a list slot per 2), ``[3,3],`` (a
version-2 request's references to one message), and, for a baseline, one long string.
``--place`` says where: a tool's result (``result``, the default), a version-2 request's
``messages`` or ``tools``, or the header's ``version`` (where most shapes make the file
invalid: the reader's verdict is then an error, found with the peak measured alike).
Each reader runs in a fresh interpreter; its peak is the
growth of VmHWM (the resident high-water mark, reset through /proc/self/clear_refs) over
what ``import session`` took, reported as a multiple of the line's size.  Linux only; the
files go to a temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"{},": b"{},", "1.5,": b"1.5,", "0,": b"0,", "[3,3],": b"[3,3],", "string": b"x"}
PLACES = ["result", "messages", "tools", "version"]
READERS = ["read", "open", "validate", "repair", "summary"]

MEASURE = """
import sys
sys.path.insert(0, sys.argv[1])
import session

def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
before = peak_kb()
reader, path = sys.argv[2], sys.argv[3]
try:
    if reader == "read":
        session.read(path, lambda record: None)
    elif reader == "open":
        session.open(path).close()
    elif reader == "validate":
        session.main(["validate", path])
    elif reader == "repair":
        session.repair(path)
    else:
        session.summarize(path)
except session.FormatError:
    pass  # the verdict on an invalid file: its peak is measured alike
print(peak_kb() - before)
"""


def hostile_file(folder: Path, shape: str, size: int, place: str = "result") -> Path:
    """A session whose line holds about *size* bytes of *shape* at *place*."""
    if place != "result":
        return hostile_version_2_file(folder, shape, size, place)
    path = folder / f"{shape.strip(',').replace('{}', 'dicts')}.jsonl"
    sid, rid = "a" * 32, "b" * 32
    head = {"session_id": sid, "seq": 1, "type": "session_start", "time": "t", "data": {"version": 1}}
    start = {"session_id": sid, "seq": 2, "type": "run_start", "time": "t", "run_id": rid, "data": {}}
    close = {"session_id": sid, "seq": 4, "type": "run_close", "time": "t", "run_id": rid, "data": {}}
    piece = SHAPES[shape]
    with path.open("wb") as f:
        for obj in (head, start):
            f.write(json.dumps(obj).encode() + b"\n")
        prefix = f'{{"session_id":"{sid}","seq":3,"type":"tool_exec_end","time":"t","run_id":"{rid}",'
        if shape == "string":
            f.write(prefix.encode() + b'"data":{"result":"')
            f.write(piece * size)
            f.write(b'"}}\n')
        else:
            f.write(prefix.encode() + b'"data":{"result":[')
            f.write(piece * (size // len(piece)))
            f.write(b"0]}}\n")
        f.write(json.dumps(close).encode() + b"\n")
    return path


def hostile_version_2_file(folder: Path, shape: str, size: int, place: str) -> Path:
    """A version-2 session (3 message, 4 tools, 5 model_request) whose request's *place*, or
    header's for ``version``, holds about *size* bytes of *shape*."""
    sys.path.insert(0, str(ROOT))
    import session

    path = folder / "hostile.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        request = session.ModelRequest([session.Message("user", [session.text_block("hi")])], [{"name": "t"}])
        run.record(session.Event("model_request", execution=session.Execution("m", "model"), request=request))
    lines = path.read_bytes().split(b"\n")
    at = 0 if place == "version" else 4
    obj = json.loads(lines[at])
    obj["data"][place] = "hostile"
    piece = SHAPES[shape]
    value = (
        b'"' + piece * size + b'"' if shape == "string" else b"[" + piece * (size // len(piece)) + b"[3,3]]"
    )
    lines[at] = json.dumps(obj, separators=(",", ":")).encode().replace(b'"hostile"', value)
    path.write_bytes(b"\n".join(lines))
    return path


WINDOW = 40  # messages each request sends: the latest ones, as a context kept short does


def version_2_file(folder: Path, messages: int) -> Path:
    """A version-2 session of *messages* distinct messages of about 1 KB, each model call
    sending the latest ``WINDOW`` of them: what a reader of version 2 indexes (every message
    record) and resolves (every request)."""
    sys.path.insert(0, str(ROOT))
    import session

    path = folder / "version-2.jsonl"
    sent: List[Any] = []
    with session.create(path) as s, s.begin_run() as run:
        for n in range(messages):
            sent = [*sent[-WINDOW + 1 :], session.Message("user", [session.text_block(f"{n} " + "x" * 1000)])]
            call = session.Execution(f"m{n}", "model")
            run.record(session.Event("model_request", execution=call, request=session.ModelRequest(sent)))
            run.record(
                session.Event("model_exec_end", execution=call, message=session.Message("assistant", []))
            )
    return path


def measure(reader: str, path: Path) -> Tuple[int, float]:
    """The peak (KB over ``import session``) and seconds of *reader* on *path*, in a fresh process."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(ROOT), reader, str(path)], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{reader} failed on {path.name}:\n{done.stderr}")
    return int(done.stdout.split()[-1]), time.monotonic() - began


def bench_version_2(messages: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = version_2_file(Path(folder), messages)
        size = path.stat().st_size
        print(f"a version-2 session of {messages} messages, {size / 1e6:.0f} MB; each request sends {WINDOW}")
        print(f"{'reader':10}{'peak MB':>10}{'bytes per message':>20}{'seconds':>10}")
        for reader in READERS:
            peak, seconds = measure(reader, path)
            print(
                f"{reader:10}{peak / 1024:>10.1f}{peak * 1024 / messages:>20.1f}{seconds:>10.1f}", flush=True
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=int, default=64, help="size of the long line, in MB")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only these shapes")
    parser.add_argument("--place", choices=PLACES, default="result", help="where the long value is")
    parser.add_argument(
        "--version-2", type=int, metavar="MESSAGES", help="measure a version-2 session instead"
    )
    args = parser.parse_args()
    if args.version_2:
        bench_version_2(args.version_2)
        return 0
    size = args.mb << 20
    print(f"peak memory over `import session`, as a multiple of a {args.mb} MB line")
    print(f"{'shape':8}" + "".join(f"{reader:>10}" for reader in READERS) + "   seconds")
    with tempfile.TemporaryDirectory() as folder:
        for shape in args.shape or SHAPES:
            path = hostile_file(Path(folder), shape, size, args.place)
            line = max(len(line) for line in path.read_bytes().split(b"\n"))
            ratios, seconds = [], []
            for reader in READERS:
                peak, took = measure(reader, path)
                seconds.append(took)
                ratios.append(peak * 1024 / line)
            path.unlink()
            cells = "".join(f"{ratio:>9.2f}x" for ratio in ratios)
            print(f"{shape:8}{cells}   {' '.join(f'{s:.0f}' for s in seconds)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
