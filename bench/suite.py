"""What the test suite costs: CPU seconds and processes started, per test file and per test.

Runs pytest once per test file, each in a process of its own, on the Python that runs this
script, and reports for each file the CPU time of that pytest process and everything it waited
for (the processes the tests start included), the number of processes the tests started, and
the tests that cost the most.  CPU time, not wall time: on a shared machine it moves far less.

    python bench/suite.py                          # every file of the default suite, sweeps whole
    python bench/suite.py --sweeps sampled         # as tox runs it on 3.9-3.12
    python bench/suite.py --top 30 test_session.py # one file, its 30 costliest tests
    python bench/suite.py --json out.json          # the figures, for comparing two runs

Standard library and pytest only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Generator, List, Tuple

import pytest

assert sys.platform != "win32", "the CPU time of child processes is measured on Unix only"

ROOT = Path(__file__).resolve().parent.parent
FILES = (
    "test_session.py",
    "test_session_export.py",
    "test_session_import.py",
    "test_session_otlp.py",
    "test_session_diff.py",
)


def cpu_now() -> float:
    """CPU seconds, user and system, of this process and of the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Recorder:
    """A pytest plugin: each test's CPU (its set-up and tear-down included) and the processes
    it started (the audit events of subprocess.Popen, os.fork and os.posix_spawn)."""

    def __init__(self) -> None:
        self.started = 0
        self.rows: List[Tuple[str, float, int]] = []
        self.failed: List[str] = []
        sys.addaudithook(self.audit)

    def audit(self, event: str, args: Tuple[Any, ...]) -> None:
        if event in ("subprocess.Popen", "os.fork", "os.posix_spawn", "os.exec"):
            self.started += 1

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any) -> Generator[None, None, None]:
        self.started, start = 0, cpu_now()
        yield
        self.rows.append((item.nodeid, cpu_now() - start, self.started))

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


def run_pytest(args: List[str], out: str) -> int:
    """In the child: pytest on *args* with the Recorder, its rows written to *out* as JSON."""
    sys.path[0] = str(ROOT)  # the project's folder, as `python -m pytest` from it has it
    recorder = Recorder()
    status = pytest.main(args, plugins=[recorder])
    Path(out).write_text(json.dumps(recorder.rows))
    Path(out + ".failed").write_text(json.dumps(recorder.failed))
    return int(status)


def measure(file: str, sweeps: str, extra: List[str]) -> Dict[str, Any]:
    """Runs the tests of *file* in a process of its own; its CPU, wall time and test rows."""
    env = dict(os.environ)
    env.pop("SESSION_TEST_SWEEPS", None)
    # bytecode cached, as tox runs it: a child's import costs here what it costs there
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if sweeps == "sampled":
        env["SESSION_TEST_SWEEPS"] = "sampled"
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder, "rows.json"))
        command = [
            sys.executable,
            __file__,
            "--child",
            out,
            "--",
            "-q",
            "-p",
            "no:cacheprovider",
            file,
            *extra,
        ]
        before, wall = cpu_now(), time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        cpu, wall = cpu_now() - before, time.perf_counter() - wall
        rows = json.loads(Path(out).read_text()) if Path(out).exists() else []
        failed = json.loads(Path(out + ".failed").read_text()) if Path(out + ".failed").exists() else []
    last = done.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return {
        "file": file,
        "status": done.returncode,
        "summary": last[0],
        "cpu": cpu,
        "wall": wall,
        "rows": rows,
        "failed": failed,
    }


def report(result: Dict[str, Any], top: int) -> None:
    rows = result["rows"]
    started = sum(row[2] for row in rows)
    in_tests = sum(row[1] for row in rows)
    print(
        f"{result['file']}: {result['cpu']:.1f} s CPU ({in_tests:.1f} s in its {len(rows)} tests),"
        f" {result['wall']:.1f} s wall, {started} processes started; {result['summary']}",
        flush=True,
    )
    for nodeid in result["failed"]:
        print(f"  FAILED {nodeid}")
    for nodeid, cpu, count in sorted(rows, key=lambda row: -row[1])[:top]:
        print(f"  {cpu:7.2f} s {count:4d} proc  {nodeid}")


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return run_pytest(sys.argv[4:], sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", default=list(FILES), help="test files (default: the suite's)")
    parser.add_argument("--sweeps", choices=("full", "sampled"), default="full", help="SESSION_TEST_SWEEPS")
    parser.add_argument("--top", type=int, default=10, help="the costliest tests shown per file")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("-k", help="passed to pytest")
    options = parser.parse_args()
    extra = ["-k", options.k] if options.k else []
    print(f"Python {sys.version.split()[0]}, sweeps {options.sweeps}", flush=True)
    results = []
    for file in options.files:
        results.append(measure(file, options.sweeps, extra))
        report(results[-1], options.top)
    total = sum(result["cpu"] for result in results)
    started = sum(row[2] for result in results for row in result["rows"])
    print(f"total: {total:.1f} s CPU, {started} processes started")
    if options.json:
        Path(options.json).write_text(
            json.dumps({"python": sys.version, "sweeps": options.sweeps, "files": results})
        )
    return 1 if any(result["status"] not in (0, 5) for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
